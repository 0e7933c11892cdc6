"""What every command shares: error handling, exit codes, shared options."""

from __future__ import annotations

import functools
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from localspec.errors import LocalspecError
from localspec.outputs import terminal

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

F = TypeVar("F", bound=Callable[..., Any])


def verbose_requested() -> bool:
    return "--verbose" in sys.argv or os.environ.get("LOCALSPEC_VERBOSE") == "1"


def user_errors(func: F) -> F:
    """Turn a LocalspecError into one sentence on stderr and exit 1; Ctrl-C into 130."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except LocalspecError as exc:
            terminal.error(exc.message, exc.detail, verbose=verbose_requested())
            raise typer.Exit(EXIT_ERROR) from None
        except KeyboardInterrupt:
            raise typer.Exit(EXIT_INTERRUPTED) from None

    return wrapper  # type: ignore[return-value]


def run_app(app: typer.Typer) -> int:
    """Run the Typer app and return the exit code. Usage errors are Typer's (exit 2);
    a bug ends in one line, not a traceback (which --verbose shows)."""
    try:
        app()
        return EXIT_OK
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (EXIT_OK if code is None else EXIT_ERROR)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader of our stdout went away (`| head`): not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:  # a bug: say so in one line
        if verbose_requested():
            traceback.print_exc()
        terminal.error(f"internal error: {exc!r} (run with --verbose for the traceback).")
        return EXIT_ERROR
