"""``localspec bench``: plain against speculative decoding on one model, as ratios."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from localspec.cli._common import (
    MODEL_HELP,
    CtxSize,
    Draft,
    DraftGpuLayers,
    DraftMax,
    DraftMin,
    DraftPMin,
    GpuLayers,
    Grammar,
    JsonObject,
    JsonSchema,
    KvType,
    NgramMax,
    NgramMin,
    Offline,
    Regex,
    Threads,
    constraint_from_flags,
    settings_from_context,
    user_errors,
)
from localspec.cli.completion import complete_model
from localspec.outputs import terminal
from localspec.defaults import DEFAULTS as D
from localspec.types import MODES

HELP = "Compare plain and speculative decoding on a prompt suite (greedy, same seed, one run)."
EPILOG = (
    "Examples:  localspec bench model.gguf  ·  localspec bench target.gguf --draft draft.gguf "
    "--modes ngram,draft  ·  localspec bench model.gguf --sweep 4,8,16 --json > bench.json"
)



def _table(records, model: str) -> Table:
    table = Table(title=f"localspec bench · {model}", title_style="bold")
    table.add_column("prompt")
    table.add_column("mode")
    for col in ("k max", "tok/s", "vs plain", "accepted", "per step"):
        table.add_column(col, justify="right")
    table.add_column("k chosen: steps")
    table.add_column("same output")
    for r in records:
        if r.mode.startswith("llama-server"):
            same = "yes" if r.identical else f"no, at char {r.first_difference}"
            table.add_row(r.prompt, r.mode, "", f"{r.decode_tokens_per_s:.1f}", f"{r.ratio:.2f}x",
                          f"{r.acceptance_rate:.0%}" if r.drafted else "", "", "",
                          same if r.mode != "llama-server plain" else "")
            continue
        if r.mode == "off":
            ref = (f"llama.cpp {r.llama_cpp_tokens_per_s:.1f} tok/s: localspec "
                   f"{r.decode_tokens_per_s / r.llama_cpp_tokens_per_s:.2f}x"
                   if r.llama_cpp_tokens_per_s else "")
            table.add_row(r.prompt, "plain", "", f"{r.decode_tokens_per_s:.1f}", "1.00x", "", "", "", ref)
            continue
        top = sorted(r.draft_lengths.items(), key=lambda kv: -kv[1])[:3]
        same = "yes" if r.identical else f"no, at {r.first_difference}" + (
            f" (gap {r.plain_margin:.3f})" if r.plain_margin is not None else "")
        ratio_style = "green" if r.ratio >= 1.0 else "red"
        table.add_row(
            r.prompt, r.ran if r.ran == r.mode else f"{r.mode}: {r.ran}", str(r.draft_max),
            f"{r.decode_tokens_per_s:.1f}", f"[{ratio_style}]{r.ratio:.2f}x[/]",
            f"{r.acceptance_rate:.0%}", f"{r.mean_accepted_per_step:.2f}",
            " ".join(f"{k}:{n}" for k, n in top), same,
        )
    return table


def _parting(row: dict) -> str:
    """Where the texts part from their plain runs', when either does (in characters)."""
    places = ([f"localspec at char {row['parts_at']}"] if row["parts_at"] is not None else []) + [
        f"llama-server {mode} at char {at}" for mode, at in row["llama_parts_at"].items()]
    return f"; texts part from plain: {', '.join(places)}" if places else ""


def _progress(r) -> None:
    line = f"  {r.prompt:<14} {r.mode:<6} {r.decode_tokens_per_s:6.1f} tok/s  {r.ratio:.2f}x"
    if r.llama_cpp_tokens_per_s:
        line += f"  (raw llama.cpp {r.llama_cpp_tokens_per_s:.1f} tok/s)"
    terminal.note(line)


@user_errors
def bench(
    ctx: typer.Context,
    model: Optional[str] = typer.Argument(None, help=MODEL_HELP + " Default: the default profile, else the embedded SmolLM2-135M.",
        autocompletion=complete_model),
    modes: Optional[str] = typer.Option(
        None, "--modes", help="Comma-separated speculative modes to compare with plain "
        "(ngram, draft, auto). Default: ngram, plus draft and auto with --draft."
    ),
    prompts_file: Optional[Path] = typer.Option(
        None, "--prompts", help='Your own prompts, JSON Lines: {"name": ..., "kind": ..., "prompt": ...}.',
        dir_okay=False,
    ),
    suite_names: Optional[str] = typer.Option(
        None, "--suite", help="Shipped suites to run, comma-separated: builtin (the default), agent, specbench "
        "(a sample of the public Spec-Bench), edits, or all."),
    only: Optional[str] = typer.Option(None, "--only", help="Run only the prompts whose name or kind contains this."),
    max_tokens: int = typer.Option(256, "--max-tokens", "-n", min=1, help="New tokens per run."),
    repeat: int = typer.Option(
        3, "--repeat", "-r", min=1, max=20,
        help="Rounds per prompt; each round times plain and every mode back to back, and the median ratio is shown (machine speed drifts).",
    ),
    sweep: Optional[str] = typer.Option(
        None, "--sweep", help="Try these --draft-max values (comma-separated) and say which is best."
    ),
    ctx_size: CtxSize = D["ctx_size"],
    threads: Threads = D["threads"],
    kv_type: KvType = D["kv_type"],
    gpu_layers: GpuLayers = D["gpu_layers"],
    draft_gpu_layers: DraftGpuLayers = D["draft_gpu_layers"],
    draft: Draft = D["draft"],
    draft_max: DraftMax = D["draft_max"],
    draft_min: DraftMin = D["draft_min"],
    draft_p_min: DraftPMin = D["draft_p_min"],
    ngram_min: NgramMin = D["ngram_min"],
    ngram_max: NgramMax = D["ngram_max"],
    json_schema: JsonSchema = None,
    json_object: JsonObject = False,
    grammar: Grammar = None,
    regex: Regex = None,
    vs_llama_server: Optional[Path] = typer.Option(
        None, "--vs-llama-server", file_okay=False, metavar="BIN_DIR",
        help="Also run llama.cpp's llama-server from BIN_DIR (plain, ngram-simple, ngram-mod) on the same prompts, "
             "same rounds, and show its ratios beside localspec's (../shared/tools/build-llama-anchor.sh builds it)."),
    vs_llama_cpp: bool = typer.Option(
        False, "--vs-llama-cpp", help="Also decode each prompt plainly with llama-cpp-python's own Llama class, for a raw llama.cpp yardstick."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON on stdout (the table goes to stderr)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show llama.cpp's log."),
    offline: Offline = False,
) -> None:
    from localspec.bench import report, runner
    from localspec.bench.suite import load_prompts, suites
    from localspec.cli._models import download_bars, quiet_hub_logs
    from localspec.engine import backend
    from localspec.loader import open_engine
    from localspec.settings import updated

    s = settings_from_context(ctx, model)
    mode_list = [m.strip().lower() for m in modes.split(",")] if modes else (
        ["ngram", "draft", "auto"] if s.draft else ["ngram"])
    for m in mode_list:
        if m not in MODES or m == "off":
            raise typer.BadParameter(f"{m!r}: use ngram, draft or auto", param_hint="--modes")
        if m in ("draft",) and not s.draft:
            raise typer.BadParameter("draft mode needs --draft MODEL", param_hint="--modes")
    try:
        sweep_values = [int(v) for v in sweep.split(",")] if sweep else None
    except ValueError:
        raise typer.BadParameter("expected numbers like 4,8,16", param_hint="--sweep") from None
    if sweep_values and any(not 1 <= v <= 64 for v in sweep_values):
        raise typer.BadParameter("values must be between 1 and 64", param_hint="--sweep")
    if sweep_values and min(sweep_values) < s.draft_min:
        raise typer.BadParameter(f"values must not be below --draft-min ({s.draft_min})", param_hint="--sweep")
    schema = json_schema if json_object or grammar or regex else s.json_schema  # a flag over the profile's
    constraint = constraint_from_flags(schema, json_object, grammar, regex)
    if vs_llama_server is not None:
        from localspec.bench.llamaserver import binary

        binary(vs_llama_server)  # before minutes of localspec's runs
    if prompts_file and suite_names:
        raise typer.BadParameter("give either --prompts or --suite, not both", param_hint="--suite")
    prompts = load_prompts(prompts_file) if prompts_file else suites(suite_names or "builtin")
    if only:
        prompts = [p for p in prompts if only in p.name or only in p.kind]
        if not prompts:
            raise typer.BadParameter(f"no prompt's name or kind contains {only!r}", param_hint="--only")
    backend.set_verbose(verbose)
    quiet_hub_logs(verbose)
    s = updated(s, {"spec": "auto" if s.draft else "ngram", "slots": 1}, "bench")
    with download_bars() as progress:
        engine = open_engine(s, offline=offline, progress=progress, note=terminal.note,
                             detail=terminal.note if verbose else lambda _: None)
    path, draft_path = engine.model.path, engine.draft.model.path if engine.draft else None
    if s.draft and draft_path is None:  # --draft auto found none: only n-gram is left to compare
        if modes and "draft" in mode_list:
            engine.close()
            raise typer.BadParameter("--draft auto found no compatible draft model", param_hint="--modes")
        mode_list = [m for m in mode_list if m != "draft"]
    try:
        terminal.note(
            f"{path.name}" + (f" with draft {draft_path.name}" if draft_path else "")
            + f" · {len(prompts)} prompts · modes plain, {', '.join(mode_list)} · {max_tokens} tokens, greedy"
        )
        def reference(tokens: list[int], n: int) -> float:
            return backend.reference_decode_rate(path, tokens, n, n_ctx=engine.n_ctx, n_threads=s.threads)

        records = runner.run(
            engine, prompts, mode_list, max_tokens=max_tokens, sweep=sweep_values, repeat=repeat,
            reference=reference if vs_llama_cpp else None,
            on_record=_progress, constraint=constraint,
        )
        costs = {b: round(t * 1e3, 2) for b, t in engine.costs.snapshot().items()}
        draft_ms = round(engine.costs.draft_step * 1e3, 2)
        n_ctx = engine.n_ctx
    finally:
        engine.close()
    if vs_llama_server is not None:
        from localspec.bench import llamaserver
        from localspec.engine.backend import default_threads

        terminal.note(f"llama-server from {vs_llama_server}: {', '.join(llamaserver.CONFIGS)}")
        theirs = llamaserver.run(vs_llama_server, path, prompts, max_tokens=max_tokens, repeat=repeat,
                                 threads=s.threads or default_threads(), n_ctx=n_ctx, on_record=_progress)
        order = {p.name: i for i, p in enumerate(prompts)}
        records = sorted(records + theirs, key=lambda r: order.get(r.prompt, len(order)))  # stable: ours first
    terminal.stderr.print(_table(records, path.name), width=max(terminal.stderr.width, 120))
    summary = report.summary(records)
    for key, sm in summary.items():
        terminal.note(f"{key}: mean {sm['mean_ratio']:.2f}x, min {sm['min_ratio']:.2f}x, max {sm['max_ratio']:.2f}x")
    for prompt, row in report.against_llama(records).items():
        terminal.note(f"{prompt}: localspec n-gram {row['localspec_ngram']:.2f}x, llama-server {row['llama_best']} "
                      f"{row['llama_best_ratio']:.2f}x: {row['ahead']:.2f} times its best"
                      + (" (neither drafted: both ran plain)" if row["neither_drafted"] else "") + _parting(row))
    kinds = report.by_kind(records)
    if len(kinds) > 1 or vs_llama_server is not None:
        for kind, geo in kinds.items():
            terminal.note(f"{kind} ({geo['prompts']} prompts), geometric mean: "
                          + ", ".join(f"{mode} {ratio:.2f}x" for mode, ratio in geo.items() if mode != "prompts"))
    if sweep_values:
        for mode, dm in report.best_draft_max(records).items():
            terminal.note(f"best --draft-max for {mode}: {dm}")
    terminal.note(f"measured target decode cost (ms by batch size): {costs}; draft step {draft_ms} ms")
    if as_json:
        data = report.to_json(
            records, model=str(path), draft=str(draft_path) if draft_path else None,
            max_tokens=max_tokens, target_cost_ms=costs, draft_step_ms=draft_ms,
        )
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
