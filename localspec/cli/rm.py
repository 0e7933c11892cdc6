"""``localspec rm``: remove a model from the Hugging Face cache."""

from __future__ import annotations

import sys

import typer

from localspec.cli._common import user_errors
from localspec.cli.completion import complete_model
from localspec.outputs import terminal

HELP = "Remove a model from the Hugging Face cache: a whole repo, one quant of it, or one file."
EPILOG = "Examples:  localspec rm Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF:Q8_0  ·  localspec rm org/repo --yes"


@user_errors
def rm(
    model: str = typer.Argument(..., help="org/repo, org/repo:QUANT or org/repo/file.gguf",
                                autocompletion=complete_model),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
) -> None:
    from localspec.cli.ls import _size
    from localspec.errors import InvalidRequest, NotInCache
    from localspec.resolve.cache import cached_models, matching, remove
    from localspec.resolve.names import parse_hub

    ref = parse_hub(model)
    found = matching(cached_models(), ref.repo, ref.quant, ref.filename)
    if not found:
        raise NotInCache(f"{model} is not in the Hugging Face cache; `localspec ls` lists what is.")
    total = sum(m.size for m in found)
    for m in found:
        terminal.note(f"{m.name}  {_size(m.size)}  {m.files[0]}")
    if not yes:
        if sys.stdin is None or not sys.stdin.isatty():
            raise InvalidRequest("Not removing without confirmation: stdin is not a terminal; pass --yes.")
        if not typer.confirm(f"Remove {len(found)} model(s), {_size(total)}?", err=True):
            raise typer.Exit(1)
    freed = remove(found)
    terminal.note(f"removed {len(found)} model(s), freed {_size(freed)}")
