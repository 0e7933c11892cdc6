"""``localspec export vllm|sglang``: the command line serving the same model on a cluster engine."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer

from localspec.cli._common import (
    MODEL_HELP,
    CtxSize,
    Draft,
    DraftMax,
    FrequencyPenalty,
    MaxTokens,
    MinP,
    NgramMax,
    NgramMin,
    Offline,
    PresencePenalty,
    RepeatPenalty,
    Seed,
    Slots,
    Spec,
    Temperature,
    TopK,
    TopP,
    env_name,
    settings_from_context,
    user_errors,
)
from localspec.cli.completion import complete_model
from localspec.defaults import DEFAULTS as D

HELP = (
    "Print the command that serves the same model on vLLM or SGLang: the original weights' Hub repo "
    "(or the GGUF), the API name, slots, context, speculation and sampling defaults."
)
EPILOG = (
    "Examples:  localspec export vllm qwen2.5-coder-1.5b  ·  localspec export sglang model.gguf "
    "--source Qwen/Qwen2.5-Coder-1.5B-Instruct -o serve.sh  ·  localspec export vllm llama-3.1-8b-instruct --json"
)


@user_errors
def export(
    ctx: typer.Context,
    engine: str = typer.Argument(..., help="vllm or sglang."),
    model: Optional[str] = typer.Argument(None, help=MODEL_HELP, autocompletion=complete_model),
    draft: Draft = D["draft"],
    spec: Spec = D["spec"],
    draft_max: DraftMax = D["draft_max"],
    ngram_min: NgramMin = D["ngram_min"],
    ngram_max: NgramMax = D["ngram_max"],
    temperature: Temperature = D["temperature"],
    top_k: TopK = D["top_k"],
    top_p: TopP = D["top_p"],
    min_p: MinP = D["min_p"],
    repeat_penalty: RepeatPenalty = D["repeat_penalty"],
    presence_penalty: PresencePenalty = D["presence_penalty"],
    frequency_penalty: FrequencyPenalty = D["frequency_penalty"],
    seed: Seed = None,
    max_tokens: MaxTokens = None,
    ctx_size: CtxSize = D["ctx_size"],
    slots: Slots = D["slots"],
    source: Optional[str] = typer.Option(
        None, "--source", metavar="ORG/REPO", envvar=env_name("source"),
        help="The Hub repo of the model's original weights (else the profile's, the GGUF header's, or the GGUF)."),
    draft_source: Optional[str] = typer.Option(
        None, "--draft-source", metavar="ORG/REPO", envvar=env_name("draft_source"), help="The same for the draft."),
    alias: Optional[str] = typer.Option(None, "--alias", help="The model's name in the API (default: as `serve` names it)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the script to this file (executable)."),
    as_json: bool = typer.Option(False, "--json", help="Print the command as JSON: argv, command, notes."),
    offline: Offline = False,
) -> None:
    from localspec.cli._models import quiet_hub_logs
    from localspec.cli.serve import DEFAULT_SLOTS, _names
    from localspec.export import ENGINES, handover, weights_of
    from localspec.resolve.local import embedded_model
    from localspec.settings import updated

    engine = engine.lower()
    if engine not in ENGINES:
        raise typer.BadParameter(f"must be one of {', '.join(ENGINES)} (got {engine!r})", param_hint="ENGINE")
    quiet_hub_logs()
    s = settings_from_context(ctx, model)  # --source and --draft-source are settings too
    if s.sources.get("slots") == "default":
        s = updated(s, {"slots": DEFAULT_SLOTS}, "default")  # as `serve` runs it
    name = s.model or str(embedded_model() or "")
    if not name:
        raise typer.BadParameter("name a model or a profile", param_hint="MODEL")
    target = weights_of(name, s.source, offline=offline)
    draft_weights = None
    if s.draft and s.draft != "auto" and s.spec in ("auto", "draft"):
        draft_weights = weights_of(s.draft, s.draft_source, offline=offline)
    h = handover(engine, s, name=alias or _names(s.profile, s.model)[0], target=target, draft=draft_weights)
    if s.draft == "auto":
        h.notes.append("draft auto is found among the models here; name one with --draft to export it.")
    text = json.dumps(h.record(), indent=2) + "\n" if as_json else h.shell(
        f"localspec export {engine} {model or name}: serves what `localspec serve {model or name}` serves")
    if output is None:
        sys.stdout.write(text)
        return
    try:
        output.write_text(text, encoding="utf-8")
        if not as_json:
            os.chmod(output, 0o755)
    except OSError as exc:
        from localspec.errors import InvalidRequest

        raise InvalidRequest(f"cannot write {output}: {exc.strerror}.") from None
