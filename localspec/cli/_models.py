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


class _Notes(logging.Handler):
    """Library log records as notes on stderr (the library itself never prints)."""

    def emit(self, record: logging.LogRecord) -> None:
        terminal.note(record.getMessage())


def show_library_notes(verbose: bool) -> None:
    """Under --verbose, the prompt cache's one-line notes (a state loaded, saved, or
    removed as damaged) go to stderr."""
    logger = logging.getLogger("localspec.prompt_cache")
    if verbose and not any(isinstance(h, _Notes) for h in logger.handlers):
        logger.addHandler(_Notes())
        logger.setLevel(logging.INFO)
        logger.propagate = False


def open_engine_for(settings, *, offline: bool, verbose: bool):
    """The engine a command's settings ask for: llama.cpp's log and the settings'
    sources under --verbose, download bars and notes on stderr."""
    from localspec.cli._common import describe_settings
    from localspec.engine import backend
    from localspec.loader import open_engine

    backend.set_verbose(verbose)
    quiet_hub_logs(verbose)
    show_library_notes(verbose)
    if verbose:
        terminal.note(describe_settings(settings))
    with download_bars() as report:
        return open_engine(settings, offline=offline, progress=report, note=terminal.note,
                           detail=terminal.note if verbose else lambda _: None)


def resolve(name: str | None, *, offline: bool = False, verbose: bool = False) -> Path:
    """A model name (path, Hub name, or None for the default) -> a local GGUF file,
    downloading with progress bars where needed."""
    from localspec import loader

    quiet_hub_logs(verbose)
    with download_bars() as report:
        return loader.resolve(name, offline=offline, progress=report)


def auto_draft_name(model: str | None, *, offline: bool = False, verbose: bool = False) -> str | None:
    """What ``--draft auto`` means for this target, said on stderr."""
    from localspec import loader

    quiet_hub_logs(verbose)
    name = loader.auto_draft_name(model, offline=offline, note=terminal.note)
    if name is not None and verbose:
        terminal.note(f"--draft auto: {name}")
    return name
