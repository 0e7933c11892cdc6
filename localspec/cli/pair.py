"""``localspec pair``: which draft models could speculate for a target."""

from __future__ import annotations

import json
import sys

import typer
from rich.table import Table

from localspec.cli._common import MODEL_HELP, Offline, user_errors
from localspec.cli.completion import complete_model
from localspec.outputs import terminal

HELP = (
    "List draft candidates for a target: its profile's draft, smaller models of its family in "
    "the cache and on the Hub, each checked for the target's tokenizer from the GGUF headers "
    "(read remotely, nothing downloaded)."
)
EPILOG = "Examples:  localspec pair Qwen/Qwen2.5-Coder-7B-Instruct-GGUF  ·  localspec pair qwen2.5-coder-7b --json"


@user_errors
def pair(
    target: str = typer.Argument(..., help=MODEL_HELP, autocompletion=complete_model),
    as_json: bool = typer.Option(False, "--json", help="Print the candidates as JSON."),
    offline: Offline = False,
) -> None:
    from localspec.cli._models import quiet_hub_logs
    from localspec.errors import InvalidModelName
    from localspec.resolve import Hub, looks_like_hub
    from localspec.resolve.pairing import candidates
    from localspec.settings import build, is_profile_name

    quiet_hub_logs()
    name = build(target, {}).model if is_profile_name(target) else target
    if not looks_like_hub(name):
        raise InvalidModelName(f"{name!r} is not a Hub model name; pair looks for drafts of Hub models (org/repo[:QUANT]).")
    info, found = candidates(Hub.from_env(offline=offline), name)
    if as_json:
        sys.stdout.write(json.dumps({
            "target": name, "target_parameters": info.n_params,
            "candidates": [{"name": c.name, "source": c.source, "compatible": c.compatible, "why": c.why,
                            "parameters": c.params, "file_bytes": c.file_bytes} for c in found],
        }, indent=2) + "\n")
        return
    if not found:
        terminal.note(f"No draft candidates found for {name}.")
        return
    table = Table(title=f"draft candidates for {name} ({info.n_params / 1e9:.2f} B parameters)", title_style="bold")
    for col in ("draft", "from", "params", "file", "compatible"):
        table.add_column(col, justify="right" if col in ("params", "file") else "left")
    for c in found:
        table.add_row(
            c.name, c.source, f"{c.params / 1e9:.2f} B" if c.params else "-",
            f"{c.file_bytes / 1e9:.2f} GB" if c.file_bytes else "-",
            ("yes" if c.compatible else "no: ") + ("" if c.compatible else c.why),
        )
    terminal.stdout_console().print(table)
