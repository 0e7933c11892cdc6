"""``localspec ls``: the GGUF models in the Hugging Face cache."""

from __future__ import annotations

import json
import sys
import time

import typer
from rich.table import Table

from localspec.cli._common import user_errors
from localspec.outputs import terminal

HELP = "List the GGUF models in the Hugging Face cache (pulled by localspec, hf or llama.cpp)."
EPILOG = "Examples:  localspec ls  ·  localspec ls --json | jq '.[].repo'"


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _params(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def _ago(t: float | None) -> str:
    if not t:
        return "-"
    s = max(time.time() - t, 0)
    for unit, secs in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= secs:
            return f"{s / secs:.0f} {unit} ago"
    return "just now"


@user_errors
def ls(as_json: bool = typer.Option(False, "--json", help="Print the list as JSON.")) -> None:
    from localspec.errors import LocalspecError
    from localspec.resolve.cache import cached_models
    from localspec.resolve.gguf_info import read_info

    rows = []
    for m in cached_models():
        try:
            info = read_info(m.files[0])
            arch, params = info.architecture, info.n_params
        except LocalspecError:
            arch, params = "unreadable", 0
        rows.append((m, arch, params))
    if as_json:
        sys.stdout.write(json.dumps([
            {"name": m.name, "repo": m.repo, "file": m.files[0].name, "quant": m.quant, "size": m.size,
             "architecture": arch, "parameters": params, "commit": m.revision, "refs": list(m.refs),
             "last_used": m.last_used, "path": str(m.files[0]), "parts": len(m.files)}
            for m, arch, params in rows
        ], indent=2) + "\n")
        return
    if not rows:
        terminal.note("No GGUF models in the Hugging Face cache; get one with: localspec pull ORG/REPO")
        return
    table = Table(title="GGUF models in the Hugging Face cache", title_style="bold")
    for col in ("repo", "file", "quant", "size", "arch", "params", "last used"):
        table.add_column(col, justify="right" if col in ("size", "params") else "left")
    for m, arch, params in rows:
        parts = f" (+{len(m.files) - 1} parts)" if len(m.files) > 1 else ""
        table.add_row(m.repo, m.files[0].name + parts, m.quant or "-", _size(m.size), arch,
                      _params(params) if params else "-", _ago(m.last_used))
    terminal.stdout_console().print(table)
