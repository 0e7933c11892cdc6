"""``localspec run``: one prompt in, the answer streamed to stdout."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer

from localspec.cli._common import (
    EXIT_INTERRUPTED,
    MODEL_HELP,
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
from localspec.cli.completion import complete_model
from localspec.errors import InvalidRequest, LocalspecError
from localspec.outputs import terminal
from localspec.outputs.records import result_record
from localspec.defaults import DEFAULTS as D
from localspec.types import FinishReason, Message, Request, Result

HELP = "Generate an answer to one prompt and stream it to stdout."
EPILOG = (
    "Examples:  localspec run model.gguf 'Why is the sky blue?'  ·  "
    "echo 'Name three colours.' | localspec run  ·  "
    "localspec run model.gguf -f notes.txt --json"
)



def _read_prompt(argument: str | None, file: Path | None) -> str:
    """The file, then piped stdin, then the prompt argument, joined by newlines: the
    long text first, the question last (as ``llm`` does), so that asking another
    question of the same file reuses its saved prefix (the prompt cache). Bytes that are
    not UTF-8 become U+FFFD, and a note on stderr says where."""
    parts = []
    if file is not None:
        try:
            parts.append(_text(file.read_bytes(), f"the prompt file {file}"))
        except OSError as exc:
            raise InvalidRequest(f"Cannot read the prompt file {file}: {exc.strerror}.") from exc
    if sys.stdin is not None and not sys.stdin.isatty():
        stream = getattr(sys.stdin, "buffer", None)
        piped = _text(stream.read(), "stdin") if stream is not None else sys.stdin.read()
        if piped.strip():
            parts.append(piped)
    if argument:
        parts.append(_text(argument.encode("utf-8", "surrogateescape"), "the prompt argument"))
    prompt = "\n".join(p.rstrip("\n") for p in parts)
    if not prompt.strip():
        raise InvalidRequest(
            "The prompt is empty; give it as an argument, with -f FILE, or on stdin."
        )
    return prompt


def _text(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        terminal.note(f"{where} is not valid UTF-8: the bytes that are not were replaced with U+FFFD")
        return data.decode("utf-8", errors="replace")


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
def run(
    ctx: typer.Context,
    model: Optional[str] = typer.Argument(
        None, help=MODEL_HELP + " Default: the default profile if one is set, else the embedded SmolLM2-135M-Instruct.",
        autocompletion=complete_model,
    ),
    prompt: Optional[str] = typer.Argument(
        None, help="The prompt (the question). A file (-f) and piped stdin come before it."
    ),
    file: Optional[Path] = typer.Option(
        None, "--file", "-f", help="Read the prompt (or more of it) from FILE.", dir_okay=False
    ),
    system: System = D["system"],
    raw: bool = typer.Option(False, "--raw", help="Send the prompt as is, without the chat template."),
    max_tokens: MaxTokens = D["max_tokens"],
    temperature: Temperature = D["temperature"],
    top_k: TopK = D["top_k"],
    top_p: TopP = D["top_p"],
    min_p: MinP = D["min_p"],
    repeat_penalty: RepeatPenalty = D["repeat_penalty"],
    presence_penalty: PresencePenalty = D["presence_penalty"],
    frequency_penalty: FrequencyPenalty = D["frequency_penalty"],
    seed: Seed = D["seed"],
    stop: list[str] = typer.Option([], "--stop", help="Stop before this text (repeatable)."),
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
    show_draft: bool = typer.Option(
        False, "--show-draft", help="Colour the tokens that came from accepted drafts (on a terminal)."
    ),
    kv_type: KvType = D["kv_type"],
    gpu_layers: GpuLayers = D["gpu_layers"],
    draft_gpu_layers: DraftGpuLayers = D["draft_gpu_layers"],
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of streaming text."),
    stats: bool = typer.Option(False, "--stats", help="Print speed and token counts on stderr."),
    n: int = typer.Option(1, "--n", min=1, max=64, help="Answers to sample from the one prompt (prefilled once; "
                          "with --seed S, answer i samples with seed S+i)."),
    beams: Optional[int] = typer.Option(
        None, "--beams", min=1, max=64, help="Beam search with this many hypotheses (deterministic; no drafts)."),
    length_penalty: float = typer.Option(
        1.0, "--length-penalty", help="Beam scores are logprob / length ** this (above 1 favours longer answers)."),
    early_stopping: bool = typer.Option(
        False, "--early-stopping", help="Stop the beam search once --beams hypotheses have ended."),
    verbose: Verbose = False,
    offline: Offline = False,
) -> None:
    from localspec.cli._models import open_engine_for
    from localspec.settings import updated

    model, prompt = _split_model_and_prompt(model, prompt)
    s = settings_from_context(ctx, model)
    if beams and n > 1:
        raise typer.BadParameter("give --n or --beams, not both", param_hint="--beams")
    if beams and stop:
        raise typer.BadParameter("beam search takes no --stop", param_hint="--beams")
    if max(n, beams or 0) > s.slots:  # each answer (or hypothesis) has a slot of its own
        s = updated(s, {"slots": max(n, beams or 0)}, "--n" if n > 1 else "--beams")
    system = s.system
    if raw and system:
        if s.sources["system"] in ("flag",) or s.sources["system"].startswith("env"):
            raise typer.BadParameter("--system needs the chat template; drop --raw.", param_hint="--system")
        system = None  # a profile's system prompt does not apply to a raw prompt
    schema = json_schema if json_object or grammar or regex else s.json_schema  # a flag over the profile's
    constraint = constraint_from_flags(schema, json_object, grammar, regex)
    text = _read_prompt(prompt, file)
    sampling = s.sampling()
    if raw:
        request = Request(prompt=text, sampling=sampling, max_tokens=s.max_tokens, stop=list(stop),
                          constraint=constraint)
    else:
        messages = ([Message("system", system)] if system else []) + [Message("user", text)]
        request = Request(messages=messages, sampling=sampling, max_tokens=s.max_tokens, stop=list(stop),
                          constraint=constraint)
    engine = open_engine_for(s, offline=offline, verbose=verbose)
    path = engine.model.path
    colour = show_draft and sys.stdout.isatty() and terminal.colour_allowed()
    if beams:
        request = replace(request, beams=beams, length_penalty=length_penalty, early_stopping=early_stopping)
        if verbose:
            terminal.note(f"beam search with {beams} hypotheses: decoding without drafts")
        try:
            _beam(engine, request, path, as_json=as_json, stats=stats)
        finally:
            engine.close()
        return
    if n > 1:
        try:
            _several(engine, request, n, path, as_json=as_json, stats=stats)
        finally:
            engine.close()
        return
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


def _beam(engine, request: Request, path: Path, *, as_json: bool, stats: bool) -> None:
    """--beams: the best hypothesis as the answer; --json lists all with their scores."""
    result = engine.generate(request)
    if result.finish_reason is FinishReason.ERROR:
        raise LocalspecError(result.error or "Generation failed.")
    if as_json:
        record = result_record(result, model=str(path), load_s=engine.load_s)
        record["beams"] = [{"text": h.text, "score": round(h.score, 6), "logprob": round(h.logprob, 6),
                            "tokens": len(h.token_ids), "finish_reason": h.finish_reason.value} for h in result.beams]
        sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
        sys.stdout.flush()
        if stats:
            terminal.note(terminal.stats_line(result, engine.load_s))
        return
    _finish(result, path, engine.load_s, as_json=False, stats=stats)


def _several(engine, request: Request, n: int, path: Path, *, as_json: bool, stats: bool) -> None:
    """--n: the answers, each when all are done, in order (JSON: one line each, with its
    index); a header on stderr before each in text mode."""
    streams = engine.submit_n(request, n)
    try:
        results = [stream.wait() for stream in streams]
    except KeyboardInterrupt:
        for stream in streams:
            stream.cancel()
        raise
    for i, result in enumerate(results):
        if as_json:
            record = {"index": i, **result_record(result, model=str(path), load_s=engine.load_s)}
            sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
        else:
            sys.stdout.flush()
            terminal.note(f"answer {i + 1} of {n}")
            sys.stdout.write(result.text if result.text.endswith("\n") else result.text + "\n")
        sys.stdout.flush()
        if stats:
            terminal.note(terminal.stats_line(result, engine.load_s))
    failed = [r for r in results if r.finish_reason is FinishReason.ERROR]
    if failed:
        raise LocalspecError(failed[0].error or "Generation failed.")


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
