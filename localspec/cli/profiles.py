"""``localspec profiles``: list, show, validate, and choose the default profile."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from localspec.cli._common import user_errors
from localspec.outputs import terminal

HELP = "Profiles: a model, its draft and their settings, by name (shipped ones and your own)."
EPILOG = (
    "Examples:  localspec profiles list  ·  localspec profiles show qwen2.5-coder-1.5b  ·  "
    "localspec profiles validate my.yaml  ·  localspec profiles default qwen2.5-coder-7b"
)

def _profile_names(incomplete: str) -> list[str]:
    from localspec import profiles

    try:
        return [p.name for p in profiles.available() if p.name.startswith(incomplete)]
    except Exception:  # a broken profile completes nothing rather than failing the shell
        return []


app = typer.Typer(help=HELP, epilog=EPILOG, no_args_is_help=True,
                  context_settings={"help_option_names": ["-h", "--help"]})


@app.command("list", help="List the profiles: shipped ones, and yours (which override shipped ones of the same name).")
@user_errors
def list_profiles(as_json: bool = typer.Option(False, "--json", help="Print the list as JSON.")) -> None:
    from localspec import profiles

    found = profiles.available()
    default = profiles.default_profile()
    if as_json:
        sys.stdout.write(json.dumps([
            {"name": p.name, "source": p.source, "path": str(p.path), "default": p.name == default,
             **p.profile.model_dump(exclude_none=True, include={"description", "model", "draft"})}
            for p in found
        ], indent=2) + "\n")
        return
    table = Table(title="profiles", title_style="bold")
    for col in ("name", "source", "model", "draft", "description"):
        table.add_column(col)
    for p in found:
        mark = " (default)" if p.name == default else ""
        table.add_row(p.name + mark, p.source, p.profile.model or "(shipped)", p.profile.draft or "-",
                      p.profile.description or "")
    terminal.stdout_console().print(table)
    terminal.note(f"your profiles: {profiles.user_dir()}")


@app.command("show", help="Show a profile's settings after your overrides, and where each comes from.")
@user_errors
def show(
    name: str = typer.Argument(..., help="A profile name.", autocompletion=_profile_names),
    as_json: bool = typer.Option(False, "--json", help="Print the settings as JSON."),
) -> None:
    from localspec import profiles

    merged: dict = {}
    sources: dict = {}
    for source, layer in profiles.layers(name):
        for k, v in layer.items():
            merged[k], sources[k] = v, source
    if as_json:
        sys.stdout.write(json.dumps({"name": name, "settings": merged, "sources": sources}, indent=2) + "\n")
        return
    table = Table(title=f"profile {name}", title_style="bold")
    table.add_column("setting")
    table.add_column("value")
    table.add_column("from")
    for k, v in merged.items():
        table.add_row(k, str(v), sources[k])
    terminal.stdout_console().print(table)


@app.command("validate", help="Check profile files: unknown keys, wrong types and bad values, with their line.")
@user_errors
def validate(files: list[Path] = typer.Argument(..., help="Profile files (.yaml).")) -> None:
    from localspec import profiles
    from localspec.errors import ProfileError

    failed = 0
    for f in files:
        try:
            p = profiles.load_file(f)
        except ProfileError as exc:
            terminal.error(exc.message)
            failed += 1
            continue
        if p.model is None and f.stem not in {q.name for q in profiles.available() if q.source == "shipped"}:
            terminal.error(f"{f}, line 1: model is missing (only a profile overriding a shipped one may leave it out).")
            failed += 1
            continue
        terminal.note(f"{f}: ok")
    if failed:
        raise typer.Exit(1)


@app.command("default", help="Show or set the default profile (what `localspec run` uses with no model).")
@user_errors
def default(
    name: Optional[str] = typer.Argument(None, help="The profile to make the default.", autocompletion=_profile_names),
    unset: bool = typer.Option(False, "--unset", help="Go back to the embedded default model."),
) -> None:
    from localspec import profiles

    if unset:
        path = profiles.set_default_profile(None)
        terminal.note(f"default profile unset in {path}")
        return
    if name is None:
        current = profiles.default_profile()
        sys.stdout.write(f"{current}\n" if current else "")
        if not current:
            terminal.note("no default profile: `localspec run` uses the embedded SmolLM2-135M")
        return
    path = profiles.set_default_profile(name)
    terminal.note(f"default profile: {name} (in {path})")


