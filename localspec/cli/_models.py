"""Resolving model names for commands: Hub downloads get a progress bar on stderr."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path

from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from localspec.outputs import terminal


def quiet_hub_logs(verbose: bool = False) -> None:
    """huggingface_hub logs retries ("Trying to resume download...") as warnings; the
    progress bar already shows them. --verbose keeps them."""
    logging.getLogger("huggingface_hub").setLevel(logging.INFO if verbose else logging.ERROR)


@contextmanager
def download_bars():
    """A ``progress(file, done, total)`` callback drawing one rich bar per file on stderr;
    nothing is drawn unless a download happens."""
    progress: Progress | None = None
    tasks: dict[str, int] = {}

    def report(name: str, done: int, total: int | None) -> None:
        nonlocal progress
        if progress is None:
            progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                console=terminal.stderr,
                transient=False,
            )
            progress.start()
        if name not in tasks:
            tasks[name] = progress.add_task(Path(name).name, total=total)
        progress.update(tasks[name], completed=done, total=total)

    try:
        yield report
    finally:
        if progress is not None:
            progress.stop()


def resolve(name: str | None, *, offline: bool = False, verbose: bool = False) -> Path:
    """A model name (path, Hub name, or None for the default) -> a local GGUF file,
    downloading with progress bars where needed."""
    from localspec.resolve import resolve_model
    from localspec.resolve.cache import touch

    quiet_hub_logs(verbose)
    with download_bars() as report:
        path = resolve_model(name, offline=offline, progress=report)
    touch(path)
    return path


def auto_draft_name(model: str | None, *, offline: bool = False, verbose: bool = False) -> str | None:
    """What ``--draft auto`` means for this target (None: nothing compatible found, and
    speculation uses n-gram lookup alone)."""
    from localspec.resolve import Hub, looks_like_hub
    from localspec.resolve.pairing import auto_draft, cached_draft_for_file

    quiet_hub_logs(verbose)
    hub = Hub.from_env(offline=offline)
    if model is None:
        name = None
    elif looks_like_hub(model):
        name = auto_draft(hub, model)
    else:
        name = cached_draft_for_file(hub, Path(model).expanduser())
    if name is None:
        terminal.note(f"--draft auto: no model with {model or 'the default model'}'s tokenizer found; "
                      "speculating with n-gram lookup alone")
    elif verbose:
        terminal.note(f"--draft auto: {name}")
    return name


def resolve_draft(draft: str | None, model: str | None, *, offline: bool = False, verbose: bool = False) -> Path | None:
    """The draft model file: as named, or the one ``auto`` finds."""
    if draft == "auto":
        draft = auto_draft_name(model, offline=offline, verbose=verbose)
    return resolve(draft, offline=offline, verbose=verbose) if draft else None
