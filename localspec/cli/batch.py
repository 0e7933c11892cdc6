"""``localspec batch``: many prompts from a JSON Lines file through every slot at once."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Optional

import typer

from localspec.cli._common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    CtxSize,
    Draft,
    DraftGpuLayers,
    DraftMax,
    DraftMin,
    DraftPMin,
    FrequencyPenalty,
    GpuLayers,
    Grammar,
    JsonObject,
    JsonSchema,
    KvType,
    MaxTokens,
    MinP,
    NgramMax,
    NgramMin,
    Offline,
    PresencePenalty,
    Regex,
    RepeatPenalty,
    Seed,
    Slots,
    Spec,
    System,
    Temperature,
    Threads,
    TopK,
    TopP,
    Verbose,
    constraint_from_flags,
    settings_from_context,
    user_errors,
    PromptCache,
    PromptCacheSize,
)
from localspec.defaults import DEFAULTS as D
from localspec.errors import InvalidRequest
from localspec.outputs import terminal

HELP = "Run every prompt of a JSON Lines file, many at once; results in input order, resumable."
EPILOG = (
    "Input lines: {\"id\": 1, \"prompt\": \"...\"} or {\"id\": 1, \"messages\": [...]}, optionally with "
    "max_tokens, temperature, seed, stop, json_schema, speculative.  Example:  "
    "localspec batch prompts.jsonl -o answers.jsonl --slots 4"
)
DEFAULT_SLOTS = 4  # batch's own default: continuous batching is the point


@user_errors
def batch(
    ctx: typer.Context,
    input: str = typer.Argument(..., help="A JSON Lines file of prompts, or - for stdin."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="The model (as `run` takes it). Default: the "
                                        "default profile, else the embedded SmolLM2-135M-Instruct."),
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", dir_okay=False,
        help="Write the results here (appending; ids already there are skipped). Default: stdout."),
    slots: Slots = DEFAULT_SLOTS,
    system: System = D["system"],
    raw: bool = typer.Option(False, "--raw", help="Send prompts as they are, without the chat template."),
    max_tokens: MaxTokens = D["max_tokens"],
    temperature: Temperature = D["temperature"],
    top_k: TopK = D["top_k"],
    top_p: TopP = D["top_p"],
    min_p: MinP = D["min_p"],
    repeat_penalty: RepeatPenalty = D["repeat_penalty"],
    presence_penalty: PresencePenalty = D["presence_penalty"],
    frequency_penalty: FrequencyPenalty = D["frequency_penalty"],
    seed: Seed = D["seed"],
    stop: list[str] = typer.Option([], "--stop", help="Stop before this text (repeatable; a line's own stop replaces it)."),
    json_schema: JsonSchema = None,
    json_object: JsonObject = False,
    grammar: Grammar = None,
    regex: Regex = None,
    ctx_size: CtxSize = D["ctx_size"],
    prompt_cache: PromptCache = D["prompt_cache"],
    prompt_cache_size: PromptCacheSize = D["prompt_cache_size"],
    threads: Threads = D["threads"],
    spec: Spec = D["spec"],
    draft: Draft = D["draft"],
    draft_max: DraftMax = D["draft_max"],
    draft_min: DraftMin = D["draft_min"],
    draft_p_min: DraftPMin = D["draft_p_min"],
    ngram_min: NgramMin = D["ngram_min"],
    ngram_max: NgramMax = D["ngram_max"],
    kv_type: KvType = D["kv_type"],
    gpu_layers: GpuLayers = D["gpu_layers"],
    draft_gpu_layers: DraftGpuLayers = D["draft_gpu_layers"],
    verbose: Verbose = False,
    offline: Offline = False,
) -> None:
    from localspec import batch as jobs
    from localspec.cli._models import open_engine_for
    from localspec.settings import updated
    from localspec.types import Message, Request

    s = settings_from_context(ctx, model)
    if s.sources.get("slots") == "default":
        s = updated(s, {"slots": DEFAULT_SLOTS}, "default")
    texts = _read_lines(input)
    done = jobs.done_ids(output) if output is not None else set()
    schema = json_schema if json_object or grammar or regex else s.json_schema  # a flag over the profile's
    base = Request(prompt=None, messages=None if raw else ([Message("system", s.system)] if s.system else []),
                   sampling=s.sampling(), max_tokens=s.max_tokens, stop=list(stop),
                   constraint=constraint_from_flags(schema, json_object, grammar, regex))
    lines = [jobs.parse_line(text, n, base) for n, text in texts]
    todo = [line for line in lines if json.dumps(line.id) not in done]
    if done:
        terminal.note(f"{len(lines) - len(todo)} of {len(lines)} lines are already in {output}; running the other {len(todo)}.")
    if not todo:
        return
    engine = open_engine_for(s, offline=offline, verbose=verbose)
    sink = output.open("ab") if output is not None else sys.stdout.buffer

    def write(record: dict[str, Any]) -> None:
        sink.write((json.dumps(record, ensure_ascii=False) + "\n").encode())  # one whole line at a time
        sink.flush()

    bar = _Bar(len(todo))
    try:
        with bar:
            failed = jobs.run(engine, todo, write, on_done=bar.advance)
    except KeyboardInterrupt:
        terminal.note(f"Interrupted after {bar.done} of {len(todo)} lines"
                      + (f"; run the same command again to go on (the ids in {output} are skipped)." if output else "."))
        raise typer.Exit(EXIT_INTERRUPTED) from None
    finally:
        engine.close()
        if output is not None:
            sink.close()
    if failed:
        terminal.error(f"{failed} of {len(todo)} lines failed; their output lines carry \"error\".")
        raise typer.Exit(EXIT_ERROR)


def _read_lines(source: str) -> list[tuple[int, str]]:
    """(line number, text) for every non-blank line."""
    try:
        data = sys.stdin.buffer.read() if source == "-" else Path(source).expanduser().read_bytes()
    except OSError as exc:
        raise InvalidRequest(f"Cannot read {source}: {exc.strerror}.") from None
    text = data.decode("utf-8", errors="replace")
    return [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]


class _Bar:
    """Lines done, tokens/s and the time left, on stderr when it is a terminal."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.tokens = total, 0, 0
        self.t0 = time.perf_counter()
        self.progress: Any = None
        if terminal.stderr.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.progress = Progress(TextColumn("batch"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[rate]}"), TimeRemainingColumn(),
                                     console=terminal.stderr, transient=False)
            self.task = self.progress.add_task("batch", total=total, rate="")

    def __enter__(self) -> _Bar:
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.progress is not None:
            self.progress.stop()

    def advance(self, _line: Any, result: Any) -> None:
        self.done += 1
        self.tokens += result.usage.completion_tokens if result is not None else 0
        if self.progress is not None:
            rate = self.tokens / max(1e-9, time.perf_counter() - self.t0)
            self.progress.update(self.task, completed=self.done, rate=f"{rate:.1f} tok/s")
