"""``localspec ps``: the models a running ``localspec serve`` holds in memory."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any, Optional

import typer
from rich.table import Table

from localspec.cli._common import user_errors
from localspec.errors import LocalspecError
from localspec.outputs import terminal

HELP = "List the models a running 'localspec serve' has loaded: draft, memory, slots busy, idle time."
EPILOG = "Examples:  localspec ps  ·  localspec ps --url http://127.0.0.1:8000 --json | jq '.[].id'"
TIMEOUT_S = 10


class ServerUnreachable(LocalspecError):
    pass


def _default_url() -> str:
    host = os.environ.get("LOCALSPEC_HOST") or "127.0.0.1"
    host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{os.environ.get('LOCALSPEC_PORT') or 8080}"


def loaded_models(url: str, api_key: str | None) -> list[dict[str, Any]]:
    """The server's /v1/models entries that are loaded."""
    request = urllib.request.Request(url.rstrip("/") + "/v1/models",
                                     headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as resp:
            body = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read())["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = f"HTTP {exc.code}"
        raise ServerUnreachable(f"The server at {url} refused: {message}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        why = getattr(exc, "reason", exc)
        raise ServerUnreachable(f"No localspec server answers at {url} ({why}); start one with: localspec serve") from None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise ServerUnreachable(f"The server at {url} did not answer /v1/models as localspec serve does.")
    return [m for m in data if isinstance(m, dict) and m.get("loaded")]


def _size(n: int | None) -> str:
    return "-" if n is None else f"{n / (1 << 30):.2f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


def _duration(s: float | None) -> str:
    if s is None:
        return "-"
    for unit, secs in (("h", 3600), ("min", 60)):
        if s >= secs:
            return f"{s / secs:.0f} {unit}"
    return f"{s:.0f} s"


@user_errors
def ps(
    url: Optional[str] = typer.Option(None, "--url", help="The server. Default: http://LOCALSPEC_HOST:LOCALSPEC_PORT "
                                                           "(127.0.0.1:8080)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar="LOCALSPEC_API_KEY", metavar="KEY",
                                          help="The server's API key (with several in the variable, the first)."),
    as_json: bool = typer.Option(False, "--json", help="Print the loaded models as JSON."),
) -> None:
    key = api_key.split()[0] if api_key and api_key.split() else None
    models = loaded_models(url or _default_url(), key)
    if as_json:
        sys.stdout.write(json.dumps(models, indent=2) + "\n")
        return
    if not models:
        terminal.note("No model is loaded; the server loads one on its first request.")
        return
    table = Table(title="Loaded models", title_style="bold")
    for col in ("model", "draft", "memory", "slots busy", "idle for", "unloads in"):
        table.add_column(col, justify="right" if col in ("memory", "slots busy", "idle for", "unloads in") else "left")
    for m in models:
        busy = m.get("slots_busy") or 0
        until = "never" if m.get("keep_alive_s") is None else _duration(m.get("expires_in_s")) if not busy else "-"
        table.add_row(str(m.get("id")), str(m.get("draft") or "-"), _size(m.get("memory_bytes")),
                      f"{busy}/{m.get('slots')}", "busy" if busy else _duration(m.get("idle_s")), until)
    terminal.stdout_console().print(table)
