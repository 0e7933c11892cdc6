"""Profiles: a named model, its draft, and the settings that suit them, in YAML.

Shipped profiles live in ``profiles/*.yaml``; the user's own in ``<config dir>/profiles``
(platformdirs' user config dir, or ``LOCALSPEC_CONFIG_DIR``). A user profile with a
shipped profile's name overrides it key by key. Validation is strict (unknown keys and
wrong types are errors) and an error names the file, the key and the line.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, create_model, field_validator

from localspec.errors import LocalspecError, ProfileError
from localspec.settings import Repo, optional_fields

NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
CONFIG_FILE = "config.yaml"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# The sections' keys and the settings they set: types and bounds come from Settings.
Speculation = create_model("Speculation", __base__=_Section, **optional_fields(
    {"mode": "spec", **{k: k for k in ("draft_max", "draft_min", "draft_p_min", "ngram_min", "ngram_max")}}))
Sampling = create_model("Sampling", __base__=_Section, **optional_fields({k: k for k in (
    "temperature", "top_k", "top_p", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty",
    "seed", "max_tokens")}))
Context = create_model("Context", __base__=_Section, **optional_fields({k: k for k in (
    "ctx_size", "slots", "kv_type", "gpu_layers", "draft_gpu_layers", "threads")}))


class Profile(_Section):
    description: str | None = None
    model: str | None = None
    draft: str | None = None
    system: str | None = None
    json_schema: str | None = None  # a file, relative to the profile's own directory
    source: Repo = None  # the Hub repo of the target's original weights (`export`)
    draft_source: Repo = None  # the draft's
    speculation: Speculation = Speculation()  # type: ignore[valid-type]
    sampling: Sampling = Sampling()  # type: ignore[valid-type]
    context: Context = Context()  # type: ignore[valid-type]

    @field_validator("model", "draft")
    @classmethod
    def _model_name(cls, value: str | None) -> str | None:
        if value is None:
            return value
        from localspec.resolve.names import looks_like_hub, parse_hub

        if value == "auto":
            return value
        if looks_like_hub(value):
            try:
                parse_hub(value)
            except LocalspecError as exc:
                raise ValueError(str(exc).rstrip(".")) from None
        elif not (value.endswith(".gguf") or NAME.match(value)):
            raise ValueError("must be a Hub name (org/repo[:QUANT]), a .gguf path or a profile name")
        return value

    def flat(self) -> dict[str, Any]:
        """The settings this profile sets, under the command-line option names."""
        out: dict[str, Any] = {}
        for key in ("model", "draft", "system", "json_schema", "source", "draft_source"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        for section, rename in ((self.speculation, {"mode": "spec"}), (self.sampling, {}), (self.context, {})):
            for key, value in section.model_dump(exclude_none=True).items():
                out[rename.get(key, key)] = value
        return out


@dataclass(frozen=True)
class ProfileFile:
    name: str
    path: Path
    source: Literal["shipped", "user"]
    profile: Profile


# ----------------------------------------------------------------- where profiles are


def shipped_dir() -> Path:
    """``profiles/`` beside the package (a checkout or an editable install), else the
    copy a wheel installs under ``<prefix>/share/localspec/profiles``."""
    beside = Path(__file__).resolve().parent.parent / "profiles"
    if beside.is_dir():
        return beside
    import sys

    return Path(sys.prefix) / "share" / "localspec" / "profiles"


def config_dir() -> Path:
    import platformdirs

    return Path(os.environ.get("LOCALSPEC_CONFIG_DIR") or platformdirs.user_config_dir("localspec"))


def user_dir() -> Path:
    return config_dir() / "profiles"


def _files(directory: Path) -> dict[str, Path]:
    if not directory.is_dir():
        return {}
    return {p.stem: p for p in sorted(directory.glob("*.yaml")) if NAME.match(p.stem)}


def available() -> list[ProfileFile]:
    """Every profile, the user's overriding shipped ones of the same name."""
    out = {name: ProfileFile(name, path, "shipped", load_file(path)) for name, path in _files(shipped_dir()).items()}
    for name, path in _files(user_dir()).items():
        out[name] = ProfileFile(name, path, "user", load_file(path))
    return [out[k] for k in sorted(out)]


def exists(name: str) -> bool:
    return bool(NAME.match(name)) and (name in _files(shipped_dir()) or name in _files(user_dir()))


def layers(name: str) -> list[tuple[str, dict[str, Any]]]:
    """The profile's settings as layers, lowest precedence first: (source, settings)."""
    if not NAME.match(name):
        raise ProfileError(f"{name!r} is not a profile name.")
    found = []
    shipped, user = _files(shipped_dir()).get(name), _files(user_dir()).get(name)
    if shipped:
        found.append((f"shipped profile {name}", load_file(shipped).flat()))
    if user:
        found.append((f"user profile {name}", load_file(user).flat()))
    if not found:
        known = ", ".join(sorted({**_files(shipped_dir()), **_files(user_dir())})) or "none"
        raise ProfileError(f"No profile named {name!r}; profiles: {known}.")
    if not any("model" in layer for _, layer in found):
        raise ProfileError(f"Profile {name!r} names no model; add `model: org/repo[:QUANT]` to it.")
    return found


# ----------------------------------------------------------------- reading and validating


def load_file(path: Path) -> Profile:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"Cannot read the profile {path}: {exc.strerror}.") from exc
    except UnicodeDecodeError:
        raise ProfileError(f"{path} is not UTF-8 text.") from None
    profile = parse(text, str(path))
    if profile.json_schema is not None:  # a schema file beside the profile, found from anywhere
        schema = path.parent / Path(profile.json_schema).expanduser()
        if not schema.is_file():
            raise ProfileError(f"{path}: json_schema names {profile.json_schema}, which is not a file "
                               f"(looked for {schema}).")
        profile = profile.model_copy(update={"json_schema": str(schema.resolve())})
    return profile


def parse(text: str, where: str) -> Profile:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f", line {mark.line + 1}" if mark else ""
        raise ProfileError(f"{where}{line}: not valid YAML ({getattr(exc, 'problem', None) or exc}).") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ProfileError(f"{where}, line 1: a profile is a mapping of keys to values.")
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(validation_message(exc, node, where)) from None


def validation_message(exc: ValidationError, node, where: str) -> str:
    """The first problem in file order, as one sentence naming the file, line and key
    (a union's several complaints about one value become one)."""
    by_loc: dict[tuple[str, ...], list[dict]] = {}
    for err in exc.errors():
        loc = tuple(str(p) for p in err["loc"] if not str(p).startswith(("literal[", "int", "function-")))
        by_loc.setdefault(loc, []).append(err)
    found = []
    for loc, errs in by_loc.items():
        line = _line_of(node, loc, key=errs[0]["type"] == "extra_forbidden")
        if len(errs) == 1:
            message = describe_error(errs[0])
        else:
            wanted = [str((e.get("ctx") or {}).get("expected")) if e["type"] == "literal_error" else "an integer"
                      for e in errs]
            message = f"must be {', or '.join(wanted)} (got {errs[0].get('input')!r})"
        found.append((line, loc, message))
    line, loc, message = min(found, key=lambda t: t[0])
    return f"{where}, line {line}: {'.'.join(loc)} {message}."


def _line_of(node, loc: tuple[str, ...], *, key: bool) -> int:
    """The line of the value at ``loc`` in the composed YAML (of the key itself for an
    unknown key); the nearest enclosing line where the path ends early."""
    line = node.start_mark.line + 1 if node is not None else 1
    for i, part in enumerate(loc):
        if not isinstance(node, yaml.MappingNode):
            break
        for k, v in node.value:
            if k.value == part:
                last = i == len(loc) - 1
                line = (k if (key and last) else v).start_mark.line + 1
                node = v
                break
        else:
            break
    return line


def describe_error(err: dict) -> str:
    """A pydantic error as the end of a sentence that starts with the key."""
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "extra_forbidden":
        return "is not a known key"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '?')} (got {value!r})"
    if kind in ("greater_than_equal", "less_than_equal"):
        bound = ctx.get("ge", ctx.get("le"))
        return f"must be {'at least' if kind == 'greater_than_equal' else 'at most'} {bound} (got {value!r})"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be an integer (got {value!r})"
    if kind in ("float_type", "float_parsing"):
        return f"must be a number (got {value!r})"
    if kind == "string_type":
        return f"must be text (got {value!r})"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"must be a mapping of keys (got {value!r})"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"])).removeprefix("Value error, ")
    return f"{err['msg'][0].lower()}{err['msg'][1:]} (got {value!r})"


# ----------------------------------------------------------------- the user's config


def default_profile() -> str | None:
    """``LOCALSPEC_PROFILE``, else ``default_profile`` in the user's config.yaml."""
    if os.environ.get("LOCALSPEC_PROFILE"):
        return os.environ["LOCALSPEC_PROFILE"]
    path = config_dir() / CONFIG_FILE
    if not path.is_file():
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ProfileError(f"Cannot read {path}: {exc}.") from None
    value = data.get("default_profile") if isinstance(data, dict) else None
    if value is not None and not isinstance(value, str):
        raise ProfileError(f"{path}: default_profile must be a profile name.")
    return value


def set_default_profile(name: str | None) -> Path:
    path = config_dir() / CONFIG_FILE
    data: dict = {}
    if path.is_file():
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if name is None:
        data.pop("default_profile", None)
    else:
        layers(name)  # it must exist and name a model
        data["default_profile"] = name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path
