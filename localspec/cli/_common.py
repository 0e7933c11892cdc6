"""What every command shares: error handling, exit codes, shared options."""

from __future__ import annotations

import functools
import os
import sys
import traceback
from collections.abc import Callable
from typing import Annotated, Any, Optional, TypeVar

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
#
# Declared once, as ``Annotated`` aliases (as huggingface_hub's cli does), and reused by
# every command with the same names, help and LOCALSPEC_* variable. Settings carry no
# bounds here: ``localspec.settings.Settings`` checks every value, from a flag, a
# variable or a profile alike (``settings_from_context``). Defaults shown in --help are
# the settings' own; what a command runs with is what ``settings_from_context`` merges.

SPEC_HELP = (
    "Speculative decoding: auto (n-gram lookup, and the draft model where no n-gram "
    "proposal pays), ngram, draft, or off. It turns itself off whenever it would not pay."
)
MODEL_HELP = (
    "A model: a .gguf path, a Hub name (org/repo, org/repo:Q8_0, org/repo/file.gguf, "
    "@revision) or a profile name."
)


def env_name(option: str) -> str:
    return "LOCALSPEC_" + option.upper()


def _setting(name: str, *flags: str, help: str, **kw: Any) -> Any:
    return typer.Option(*(flags or ("--" + name.replace("_", "-"),)), help=help, envvar=env_name(name), **kw)


Draft = Annotated[Optional[str], _setting(
    "draft", help="A draft model with the target's tokenizer: a .gguf path, a Hub name, or auto (find one).")]
Spec = Annotated[str, _setting("spec", help=SPEC_HELP)]
DraftMax = Annotated[int, _setting("draft_max", help="Draft at most this many tokens a step (1-64).")]
DraftMin = Annotated[int, _setting("draft_min", help="When drafting, draft at least this many.")]
DraftPMin = Annotated[float, _setting(
    "draft_p_min", help="Stop drafting when the draft model's top probability falls below this.")]
NgramMin = Annotated[int, _setting("ngram_min", help="Shortest n-gram to look up.")]
NgramMax = Annotated[int, _setting("ngram_max", help="Longest n-gram to look up.")]

System = Annotated[Optional[str], _setting("system", "--system", "-s", help="A system prompt.")]
Temperature = Annotated[float, _setting("temperature", "--temperature", "-t", help="0 is greedy.")]
TopK = Annotated[int, _setting("top_k", help="0 is off.")]
TopP = Annotated[float, _setting("top_p", help="1 is off.")]
MinP = Annotated[float, _setting("min_p", help="0 is off.")]
RepeatPenalty = Annotated[float, _setting("repeat_penalty", help="1 is off.")]
PresencePenalty = Annotated[float, _setting("presence_penalty", help="0 is off.")]
FrequencyPenalty = Annotated[float, _setting("frequency_penalty", help="0 is off.")]
Seed = Annotated[Optional[int], _setting("seed", help="Make sampling reproducible (any integer).")]
MaxTokens = Annotated[Optional[int], _setting(
    "max_tokens", "--max-tokens", "-n", help="Stop after this many tokens. Default: no limit.")]

CtxSize = Annotated[Optional[int], _setting(
    "ctx_size", "--ctx-size", "-c", help="Context per slot, in tokens. Default: the model's, at most 4096.")]
Slots = Annotated[int, _setting("slots", help="Parallel sequences (KV slots).")]
Threads = Annotated[Optional[int], _setting("threads", help="CPU threads. Default: all cores.")]
PromptCache = Annotated[bool, typer.Option(
    "--prompt-cache/--no-prompt-cache", envvar=env_name("prompt_cache"),
    help="Keep long prompts' KV state on disk, so the same text is not prefilled again "
         "(LOCALSPEC_NO_PROMPT_CACHE=1 also turns it off).")]
PromptCacheSize = Annotated[str, _setting(
    "prompt_cache_size", metavar="SIZE", help="Disk the prompt cache may take (least recently used states go first).")]
KvType = Annotated[str, _setting("kv_type", help="KV cache type: f16, q8_0 or q4_0.")]
GpuLayers = Annotated[str, _setting("gpu_layers", help="Target layers on the GPU: auto (planned), all, or N.")]
DraftGpuLayers = Annotated[str, _setting("draft_gpu_layers", help="Draft layers on the GPU: auto, all, or N.")]

JsonSchema = Annotated[Optional[str], typer.Option(
    "--json-schema", help="Make the output match this JSON schema (a file, or the schema's JSON text).")]
JsonObject = Annotated[bool, typer.Option("--json-object", help="Make the output a JSON object (any).")]
Grammar = Annotated[Optional[str], typer.Option(
    "--grammar", help="Make the output match this grammar: GBNF, or Lark with a first line %llguidance (a file or the text).")]
Regex = Annotated[Optional[str], typer.Option("--regex", help="Make the output match this regular expression.")]


def constraint_from_flags(json_schema: str | None, json_object: bool, grammar: str | None, regex: str | None):
    """The one constraint the flags ask for (a usage error if several), or None."""
    from pathlib import Path

    from localspec.types import Constraint

    given = [f for f, v in (("--json-schema", json_schema), ("--json-object", json_object), ("--grammar", grammar),
                            ("--regex", regex)) if v]
    if len(given) > 1:
        raise typer.BadParameter(f"give one of {', '.join(given)}, not several", param_hint=given[1])

    def text(value: str, flag: str) -> str:
        try:
            path = Path(value).expanduser()
            if len(value) < 4096 and "\n" not in value and path.is_file():
                return path.read_text(encoding="utf-8")
        except OSError as exc:
            raise typer.BadParameter(f"cannot read {value}: {exc.strerror}", param_hint=flag) from None
        except UnicodeDecodeError:
            raise typer.BadParameter(f"{value} is not UTF-8 text", param_hint=flag) from None
        return value

    if json_schema:
        return Constraint("json_schema", text(json_schema, "--json-schema"))
    if json_object:
        return Constraint("json_object")
    if grammar:
        body = text(grammar, "--grammar")
        return Constraint("lark" if body.lstrip().startswith("%llguidance") else "gbnf", body)
    if regex:
        return Constraint("regex", regex)
    return None


Offline = Annotated[bool, typer.Option(
    "--offline", envvar="LOCALSPEC_OFFLINE",
    help="Use the Hugging Face cache only, never the network (HF_HUB_OFFLINE=1 does the same).")]
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Show llama.cpp's log and details.")]


# ---------------------------------------------------------------- settings


def given_settings(ctx: typer.Context) -> dict[str, tuple[object, str]]:
    """The settings the running command's flags and LOCALSPEC_* variables set: name ->
    (value, "flag" | "env LOCALSPEC_X")."""
    from localspec.settings import NAMES

    given = {}
    for name in NAMES:
        if name not in ctx.params or name == "model":  # the model argument is passed as is
            continue
        source = getattr(ctx.get_parameter_source(name), "name", "DEFAULT")
        if source == "COMMANDLINE":
            given[name] = (ctx.params[name], "flag")
        elif source == "ENVIRONMENT":
            given[name] = (ctx.params[name], f"env {env_name(name)}")
    return given


def settings_from_context(ctx: typer.Context, model: str | None):
    """The merged settings of the running command: its flags and LOCALSPEC_* variables
    (as Typer saw them) over the profile's layers over the defaults. A bad flag is a
    usage error (exit 2) naming the flag; a bad variable or profile value, one sentence."""
    from localspec.settings import SettingError, build

    try:
        return build(model, given_settings(ctx))
    except SettingError as exc:
        if exc.source == "flag":
            raise typer.BadParameter(exc.problem, param_hint="--" + exc.key.replace("_", "-")) from None
        raise


def describe_settings(s) -> str:
    """One line for --verbose: the profile and where each non-default setting came from."""
    parts = [f"profile {s.profile}" if s.profile else "no profile"]
    for k, source in s.sources.items():
        if source != "default" and k != "system":
            parts.append(f"{k}={getattr(s, k)} ({source})")
    return "settings: " + ", ".join(parts)
