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
        app(prog_name="localspec")  # also under `python -m localspec` (completion keys on it)
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


# ---------------------------------------------------------------- shared options

SPEC_HELP = (
    "Speculative decoding: auto (n-gram lookup, and the draft model where no n-gram "
    "proposal pays), ngram, draft, or off. It turns itself off whenever it would not pay."
)


def spec_options():
    """The speculation options that run and bench share, as Typer parameter defaults."""
    from localspec.engine.speculate import SpecConfig

    d = SpecConfig()
    return dict(
        spec=typer.Option("auto", "--spec", help=SPEC_HELP, case_sensitive=False),
        draft=typer.Option(None, "--draft", help="A draft model with the target's tokenizer: a .gguf path, a Hub name, or auto (find one)."),
        draft_max=typer.Option(d.draft_max, "--draft-max", min=1, max=64, help="Draft at most this many tokens a step."),
        draft_min=typer.Option(d.draft_min, "--draft-min", min=0, max=64, help="When drafting, draft at least this many."),
        draft_p_min=typer.Option(
            d.draft_p_min, "--draft-p-min", min=0.0, max=1.0,
            help="Stop drafting when the draft model's top probability falls below this.",
        ),
        ngram_min=typer.Option(d.ngram_min, "--ngram-min", min=1, max=16, help="Shortest n-gram to look up."),
        ngram_max=typer.Option(d.ngram_max, "--ngram-max", min=1, max=16, help="Longest n-gram to look up."),
    )


def spec_config(spec: str, draft_max: int, draft_min: int, draft_p_min: float, ngram_min: int, ngram_max: int):
    from localspec.engine.speculate import MODES, SpecConfig

    mode = spec.lower()
    if mode not in MODES:
        raise typer.BadParameter(f"use one of {', '.join(MODES)}", param_hint="--spec")
    if ngram_min > ngram_max:
        raise typer.BadParameter("must not exceed --ngram-max", param_hint="--ngram-min")
    if draft_min > draft_max:
        raise typer.BadParameter("must not exceed --draft-max", param_hint="--draft-min")
    return SpecConfig(
        mode=mode, draft_max=draft_max, draft_min=draft_min, draft_p_min=draft_p_min,
        ngram_min=ngram_min, ngram_max=ngram_max,
    )


def check_kv_type(value: str) -> str:
    """--kv-type: one of the cache types llama.cpp takes (a usage error otherwise)."""
    if value not in ("f16", "q8_0", "q4_0"):
        raise typer.BadParameter("use f16, q8_0 or q4_0", param_hint="--kv-type")
    return value


def check_layers(value: str, flag: str = "--gpu-layers") -> str:
    """--gpu-layers / --draft-gpu-layers: auto, all, or a number of layers."""
    if value not in ("auto", "all") and not value.isdigit():
        raise typer.BadParameter("use auto, all or a number of layers", param_hint=flag)
    return value


def offline_option():
    return typer.Option(
        False, "--offline", envvar="LOCALSPEC_OFFLINE",
        help="Use the Hugging Face cache only, never the network (HF_HUB_OFFLINE=1 does the same).",
    )


MODEL_HELP = (
    "A model: a .gguf path, a Hub name (org/repo, org/repo:Q8_0, org/repo/file.gguf, "
    "@revision) or a profile name."
)


# ---------------------------------------------------------------- settings


def env_name(option: str) -> str:
    return "LOCALSPEC_" + option.upper()


def with_env(func: F) -> F:
    """Give every option that is a setting (``settings.DEFAULTS``) its LOCALSPEC_* variable,
    so that Typer reads it and --help shows it."""
    import inspect

    from typer.models import OptionInfo

    from localspec.settings import DEFAULTS

    for name, param in inspect.signature(func).parameters.items():
        if name in DEFAULTS and isinstance(param.default, OptionInfo) and not param.default.envvar:
            param.default.envvar = env_name(name)
    return func


def settings_from_context(ctx: typer.Context, model: str | None):
    """The merged settings of the running command: its flags and LOCALSPEC_* variables
    (as Typer saw them) over the profile's layers over the defaults."""
    from localspec.settings import DEFAULTS, build

    given = {}
    for name in DEFAULTS:
        if name not in ctx.params or name == "model":  # the model argument is passed as is
            continue
        source = getattr(ctx.get_parameter_source(name), "name", "DEFAULT")
        if source == "COMMANDLINE":
            given[name] = (ctx.params[name], "flag")
        elif source == "ENVIRONMENT":
            given[name] = (ctx.params[name], f"env {env_name(name)}")
    return build(model, given)


def describe_settings(s) -> str:
    """One line for --verbose: the profile and where each non-default setting came from."""
    parts = [f"profile {s.profile}" if s.profile else "no profile"]
    for k, source in s.sources.items():
        if source != "default" and k != "system":
            parts.append(f"{k}={s.values[k]} ({source})")
    return "settings: " + ", ".join(parts)
