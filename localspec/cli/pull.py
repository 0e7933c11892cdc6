"""``localspec pull``: download a model (and its draft) into the Hugging Face cache."""

from __future__ import annotations

import json
import sys
from typing import Optional

import typer

from localspec.cli._common import MODEL_HELP, user_errors
from localspec.cli.completion import complete_model
from localspec.outputs import terminal

HELP = "Download a model (and a draft) from the Hugging Face Hub into the standard HF cache."
EPILOG = (
    "Examples:  localspec pull Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF  ·  "
    "localspec pull bartowski/Llama-3.2-1B-Instruct-GGUF:Q8_0  ·  "
    "localspec pull qwen2.5-coder-7b --draft Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"
)


@user_errors
def pull(
    model: str = typer.Argument(..., help=MODEL_HELP, autocompletion=complete_model),
    draft: Optional[str] = typer.Option(None, "--draft", help="A draft model to pull as well."),
    as_json: bool = typer.Option(False, "--json", help="Print what was pulled as JSON."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show huggingface_hub's log."),
) -> None:
    from localspec.cli._models import download_bars, quiet_hub_logs
    from localspec.errors import InvalidModelName
    from localspec.resolve import Hub, looks_like_hub, parse_hub

    quiet_hub_logs(verbose)
    from localspec.settings import build, is_profile_name

    names = [model]
    if is_profile_name(model):  # a profile: its model and its draft
        s = build(model, {})
        names = [s.model] + ([s.draft] if s.draft and s.draft != "auto" else [])
    names += [draft] if draft else []
    pulled = []
    hub = Hub.from_env()
    for name in names:
        if not looks_like_hub(name):
            raise InvalidModelName(f"{name!r} is not a Hub model name (org/repo[:QUANT]); nothing to pull.")
        with download_bars() as report:
            got = hub.resolve(parse_hub(name), progress=report)
        pulled.append(got)
        if not as_json:
            state = "downloaded" if got.downloaded else "already in the cache"
            terminal.note(f"{got.repo}{':' + got.quant if got.quant else ''} {state}: {got.path}")
    if as_json:
        records = [{"repo": g.repo, "quant": g.quant, "commit": g.commit, "downloaded": g.downloaded,
                    "path": str(g.path), "files": [str(p) for p in g.paths]} for g in pulled]
        sys.stdout.write(json.dumps(records, indent=2) + "\n")
    else:
        for g in pulled:
            sys.stdout.write(f"{g.path}\n")
