"""``localspec run``: one prompt in, the answer streamed to stdout."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from localspec.cli._common import (
    MODEL_HELP,
    describe_settings,
    settings_from_context,
    with_env,
    offline_option,
    EXIT_INTERRUPTED,
    check_kv_type,
    check_layers,
    spec_config,
    spec_options,
    user_errors,
)
from localspec.errors import InvalidRequest, LocalspecError
from localspec.cli.completion import complete_model
from localspec.outputs import terminal
from localspec.outputs.records import result_record
from localspec.types import FinishReason, Message, Request, Result, SamplingParams

HELP = "Generate an answer to one prompt and stream it to stdout."
EPILOG = (
    "Examples:  localspec run model.gguf 'Why is the sky blue?'  ·  "
    "echo 'Name three colours.' | localspec run  ·  "
    "localspec run model.gguf -f notes.txt --json"
)

_D = SamplingParams()
_S = spec_options()


def _read_prompt(argument: str | None, file: Path | None) -> str:
    """The prompt argument, then the file, then piped stdin, joined by newlines."""
    parts = [argument] if argument else []
    if file is not None:
        try:
            parts.append(file.read_text(encoding="utf-8"))
        except OSError as exc:
            raise InvalidRequest(f"Cannot read the prompt file {file}: {exc.strerror}.") from exc
        except UnicodeDecodeError as exc:
            raise InvalidRequest(f"The prompt file {file} is not UTF-8 text.") from exc
    if sys.stdin is not None and not sys.stdin.isatty():
        piped = sys.stdin.read()
        if piped.strip():
            parts.append(piped)
    prompt = "\n".join(p.rstrip("\n") for p in parts)
    if not prompt.strip():
        raise InvalidRequest(
            "The prompt is empty; give it as an argument, with -f FILE, or on stdin."
        )
    return prompt


def _looks_like_model(arg: str) -> bool:
    from localspec.settings import is_profile_name

    if arg.endswith(".gguf") or "/" in arg or "\\" in arg:
        return True
    if is_profile_name(arg):
        return True
    try:
        return Path(arg).expanduser().is_file()
    except OSError:  # a long prompt is no file name
        return False


def _split_model_and_prompt(model: str | None, prompt: str | None) -> tuple[str | None, str | None]:
    """``run "some question"``: a lone argument that does not look like a model (a
    .gguf name, a path, an existing file) is the prompt, for the default model."""
    if model is not None and prompt is None and not _looks_like_model(model):
        return None, model
    return model, prompt


@user_errors
@with_env
def run(
    ctx: typer.Context,
    model: Optional[str] = typer.Argument(
        None, help=MODEL_HELP + " Default: the default profile if one is set, else the embedded SmolLM2-135M-Instruct.",
        autocompletion=complete_model,
    ),
    prompt: Optional[str] = typer.Argument(
        None, help="The prompt. Piped stdin is appended after it."
    ),
    file: Optional[Path] = typer.Option(
        None, "--file", "-f", help="Read the prompt (or more of it) from FILE.", dir_okay=False
    ),
    system: Optional[str] = typer.Option(None, "--system", "-s", help="A system prompt."),
    raw: bool = typer.Option(False, "--raw", help="Send the prompt as is, without the chat template."),
    max_tokens: Optional[int] = typer.Option(
        None, "--max-tokens", "-n", min=1, help="Stop after this many tokens. Default: no limit."
    ),
    temperature: float = typer.Option(_D.temperature, "--temperature", "-t", min=0.0, help="0 is greedy."),
    top_k: int = typer.Option(_D.top_k, "--top-k", min=0, help="0 is off."),
    top_p: float = typer.Option(_D.top_p, "--top-p", min=0.0, max=1.0, help="1 is off."),
    min_p: float = typer.Option(_D.min_p, "--min-p", min=0.0, max=1.0, help="0 is off."),
    repeat_penalty: float = typer.Option(
        _D.repeat_penalty, "--repeat-penalty", min=0.0, help="1 is off."
    ),
    presence_penalty: float = typer.Option(_D.presence_penalty, "--presence-penalty"),
    frequency_penalty: float = typer.Option(_D.frequency_penalty, "--frequency-penalty"),
    seed: Optional[int] = typer.Option(None, "--seed", help="Make sampling reproducible."),
    stop: list[str] = typer.Option([], "--stop", help="Stop before this text (repeatable)."),
    ctx_size: Optional[int] = typer.Option(
        None, "--ctx-size", "-c", min=16, help="Context length in tokens. Default: the model's, at most 4096."
    ),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="CPU threads. Default: all cores."),
    spec: str = _S["spec"],
    draft: Optional[str] = _S["draft"],
    draft_max: int = _S["draft_max"],
    draft_min: int = _S["draft_min"],
    draft_p_min: float = _S["draft_p_min"],
    ngram_min: int = _S["ngram_min"],
    ngram_max: int = _S["ngram_max"],
    show_draft: bool = typer.Option(
        False, "--show-draft", help="Colour the tokens that came from accepted drafts (on a terminal)."
    ),
    kv_type: str = typer.Option("f16", "--kv-type", help="KV cache type: f16, q8_0 or q4_0."),
    gpu_layers: str = typer.Option("auto", "--gpu-layers", help="Target layers on the GPU: auto (planned), all, or N."),
    draft_gpu_layers: str = typer.Option("auto", "--draft-gpu-layers", help="Draft layers on the GPU: auto, all, or N."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of streaming text."),
    stats: bool = typer.Option(False, "--stats", help="Print speed and token counts on stderr."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show llama.cpp's log and details."),
    offline: bool = offline_option(),
) -> None:
    from localspec.cli._models import resolve, resolve_draft
    from localspec.engine import EngineConfig, backend
    from localspec.loader import describe, load_engine, plan_for

    model, prompt = _split_model_and_prompt(model, prompt)
    s = settings_from_context(ctx, model)
    system, max_tokens, draft = s.system, s.max_tokens, s.draft
    if raw and system:
        if s.sources["system"] in ("flag",) or s.sources["system"].startswith("env"):
            raise typer.BadParameter("--system needs the chat template; drop --raw.", param_hint="--system")
        system = None  # a profile's system prompt does not apply to a raw prompt
    speculation = spec_config(s.spec, s.draft_max, s.draft_min, s.draft_p_min, s.ngram_min, s.ngram_max)
    text = _read_prompt(prompt, file)
    backend.set_verbose(verbose)
    if verbose:
        terminal.note(describe_settings(s))
    path = resolve(s.model, offline=offline, verbose=verbose)
    draft_path = resolve_draft(draft, s.model, offline=offline, verbose=verbose)
    sampling = s.sampling()
    if raw:
        request = Request(prompt=text, sampling=sampling, max_tokens=max_tokens, stop=list(stop))
    else:
        messages = ([Message("system", system)] if system else []) + [Message("user", text)]
        request = Request(messages=messages, sampling=sampling, max_tokens=max_tokens, stop=list(stop))

    layout = plan_for(path, draft_path, ctx_size=s.ctx_size, slots=1, kv_type=check_kv_type(s.kv_type),
                      gpu_layers=check_layers(str(s.gpu_layers)),
                      draft_gpu_layers=check_layers(str(s.draft_gpu_layers), "--draft-gpu-layers"))
    if verbose:
        terminal.note(describe(layout))
    engine = load_engine(
        path,
        EngineConfig(n_threads=s.threads, draft_model=draft_path, spec=speculation),
        layout,
        note=terminal.note,
    )
    colour = show_draft and sys.stdout.isatty() and terminal.colour_allowed()
    try:
        stream = engine.submit(request)
        if verbose:
            terminal.note(
                f"model {path} · context {engine.n_ctx} · threads {engine.ctx.n_threads} · "
                f"template {stream.template or 'none (raw)'} · prompt {stream.prompt_tokens} tokens"
            )
        interrupted = False
        try:
            for event in stream:
                if not as_json:
                    terminal.write_text(event.text, highlight=colour and event.from_draft)
        except KeyboardInterrupt:
            interrupted = True
            stream.cancel()
            for event in stream:  # what was generated before the engine saw the cancel
                if not as_json:
                    terminal.write_text(event.text)
        result = stream.result
    finally:
        engine.close()
    assert result is not None
    _finish(result, path, engine.load_s, as_json=as_json, stats=stats)
    if interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
    if result.finish_reason is FinishReason.ERROR:
        raise LocalspecError(result.error or "Generation failed.")


def _finish(result: Result, path: Path, load_s: float, *, as_json: bool, stats: bool) -> None:
    if as_json:
        record = result_record(result, model=str(path), load_s=load_s)
        sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
    elif result.text and not result.text.endswith("\n"):
        sys.stdout.write("\n")  # end the answer's line, as a shell expects
    sys.stdout.flush()
    if stats:
        terminal.note(terminal.stats_line(result, load_s))
        if result.spec is not None:
            terminal.note(terminal.spec_line(result.spec))
