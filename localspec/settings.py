"""Settings: one typed model, one validation, merged in one place in a documented order
of precedence:

    command-line flag > environment variable (LOCALSPEC_*) > user profile
    > shipped profile > built-in default

Flags and environment variables reach here together from Typer (an option's ``envvar``),
each marked with where it came from; profiles add their layers below them. The field
constraints here are the only ones: profiles' sections are derived from them
(``optional_fields``), the CLI's options carry none of their own, and a bad value ends
in one sentence naming the setting and where it came from.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from localspec.defaults import DEFAULTS as D
from localspec.errors import InvalidRequest
from localspec.types import MODES, SamplingParams, SpecConfig

def _layers(value: Any) -> Any:
    """auto, all, or a number of layers (a flag gives "12", a profile 12)."""
    if isinstance(value, str) and value.strip().lower() in ("auto", "all"):
        return value.strip().lower()
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    negative = isinstance(value, int) or (isinstance(value, str) and value.strip().lstrip("-").isdigit())
    raise ValueError(f"must be 'auto' or 'all', or an integer{' of at least 0' if negative else ''} (got {value!r})")


Layers = Annotated[Union[Literal["auto", "all"], int], BeforeValidator(_layers)]


def _size(value: Any) -> Any:
    """A size in bytes: 4GiB, 512MiB, or a number of bytes."""
    from localspec.devices import parse_size

    if isinstance(value, str):
        try:
            return parse_size(value)
        except InvalidRequest:
            raise ValueError(f"must be a size like 4GiB or 512MiB (got {value!r})") from None
    return value


def _repo(value: Any) -> Any:
    """A Hub repository, org/name (where a GGUF's original weights live)."""
    import re

    if value is None or (isinstance(value, str) and re.fullmatch(r"[\w.-]+/[\w.-]+", value)):
        return value
    raise ValueError(f"must be a Hub repository, org/name (got {value!r})")


Repo = Annotated[Optional[str], BeforeValidator(_repo)]


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


class Settings(BaseModel):
    """What a command runs with. ``sources`` says where each value came from ("default",
    "flag", "env LOCALSPEC_X", "shipped profile P", "user profile P", "argument")."""

    model_config = ConfigDict(extra="forbid")

    model: Optional[str] = None
    draft: Optional[str] = None
    system: Optional[str] = None
    json_schema: Optional[str] = None  # a schema file (or its text) the output must match
    # the Hub repos of the original (unquantized) weights, for `export` to a cluster engine
    source: Repo = None
    draft_source: Repo = None
    # speculation
    spec: Annotated[Literal[MODES], BeforeValidator(_lower)] = D["spec"]  # type: ignore[valid-type]
    draft_max: Annotated[int, Field(ge=1, le=64)] = D["draft_max"]
    draft_min: Annotated[int, Field(ge=0, le=64)] = D["draft_min"]
    draft_p_min: Annotated[float, Field(ge=0, le=1)] = D["draft_p_min"]
    ngram_min: Annotated[int, Field(ge=1, le=16)] = D["ngram_min"]
    ngram_max: Annotated[int, Field(ge=1, le=16)] = D["ngram_max"]
    # sampling
    temperature: Annotated[float, Field(ge=0)] = D["temperature"]
    top_k: Annotated[int, Field(ge=0)] = D["top_k"]
    top_p: Annotated[float, Field(ge=0, le=1)] = D["top_p"]
    min_p: Annotated[float, Field(ge=0, le=1)] = D["min_p"]
    repeat_penalty: Annotated[float, Field(ge=0)] = D["repeat_penalty"]
    presence_penalty: float = D["presence_penalty"]
    frequency_penalty: float = D["frequency_penalty"]
    seed: Optional[int] = None
    max_tokens: Optional[Annotated[int, Field(ge=1)]] = None
    # context and memory
    ctx_size: Optional[Annotated[int, Field(ge=16)]] = None
    slots: Annotated[int, Field(ge=1, le=256)] = D["slots"]
    kv_type: Literal["f16", "q8_0", "q4_0"] = D["kv_type"]
    gpu_layers: Layers = D["gpu_layers"]
    draft_gpu_layers: Layers = D["draft_gpu_layers"]
    threads: Optional[Annotated[int, Field(ge=1)]] = None
    # long prompts' KV states kept on disk (engine/promptcache.py)
    prompt_cache: bool = D["prompt_cache"]
    prompt_cache_size: Annotated[int, BeforeValidator(_size), Field(ge=0, validate_default=True)] = D["prompt_cache_size"]
    # provenance, not settings
    sources: dict[str, str] = Field(default_factory=dict, exclude=True)
    profile: Optional[str] = Field(default=None, exclude=True)

    def spec_config(self) -> SpecConfig:
        return SpecConfig(
            mode=self.spec, draft_max=self.draft_max, draft_min=self.draft_min,
            draft_p_min=self.draft_p_min, ngram_min=self.ngram_min, ngram_max=self.ngram_max,
        )

    def sampling(self) -> SamplingParams:
        return SamplingParams(
            temperature=self.temperature, top_k=self.top_k, top_p=self.top_p, min_p=self.min_p,
            repeat_penalty=self.repeat_penalty, presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty, seed=self.seed,
        )


NAMES: tuple[str, ...] = tuple(n for n in Settings.model_fields if n not in ("sources", "profile"))
DEFAULTS: dict[str, Any] = {n: Settings.model_fields[n].default for n in NAMES}
# Pairs that must be ordered: (smaller, larger).
_ORDERED = (("draft_min", "draft_max"), ("ngram_min", "ngram_max"))


class SettingError(InvalidRequest):
    """A setting with a bad value: ``key`` names it, ``source`` says where it came from."""

    def __init__(self, key: str, source: str, problem: str) -> None:
        where = "" if source in ("flag", "default", "argument") else f" (from {source})"
        super().__init__(f"{key}{where} {problem}.")
        self.key, self.source, self.problem = key, source, problem


def optional_fields(names: dict[str, str]) -> dict[str, Any]:
    """Fields for a model whose keys may be left out (profiles): ``names`` maps each key
    to the setting it sets; each keeps that setting's type and constraints."""
    out: dict[str, Any] = {}
    for key, name in names.items():
        field = Settings.model_fields[name]
        annotation = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
        out[key] = (Optional[annotation], None)
    return out


def is_profile_name(name: str) -> bool:
    from localspec import profiles
    from localspec.resolve.names import looks_like_hub, looks_like_path

    return not looks_like_hub(name) and not looks_like_path(name) and profiles.exists(name)


def build(model: str | None, given: dict[str, tuple[Any, str]]) -> Settings:
    """``model`` as typed (a profile name, a model name, or None for the default profile);
    ``given``: option -> (value, "flag" | "env LOCALSPEC_X") for what was set."""
    from localspec import profiles

    profile = model if model is not None and is_profile_name(model) else None
    if model is None:
        profile = profiles.default_profile()
    values, sources = dict(DEFAULTS), {k: "default" for k in DEFAULTS}
    if profile is not None:
        for source, layer in profiles.layers(profile):
            for k, v in layer.items():
                values[k], sources[k] = v, source
    if model is not None and profile is None:
        values["model"], sources["model"] = model, "argument"
    for k, (v, source) in given.items():
        values[k], sources[k] = v, source
    return _validated(values, sources, profile)


def updated(settings: Settings, values: dict[str, Any], source: str = "argument") -> Settings:
    """``settings`` with ``values`` set (from ``source``), checked like the rest."""
    sources = {**settings.sources, **{k: source for k in values}}
    return _validated({**settings.model_dump(), **values}, sources, settings.profile)


def _validated(values: dict[str, Any], sources: dict[str, str], profile: str | None) -> Settings:
    try:
        settings = Settings.model_validate({**values, "sources": sources, "profile": profile})
    except ValidationError as exc:
        err = exc.errors()[0]
        key = str(err["loc"][0])
        raise SettingError(key, sources.get(key, "default"), _problem(err)) from None
    for low, high in _ORDERED:
        if getattr(settings, low) > getattr(settings, high):
            key = next((k for k in (low, high) if sources.get(k) == "flag"), None) or (
                low if sources.get(low, "default") != "default" else high)
            raise SettingError(key, sources.get(key, "default"), f"must not exceed --{high.replace('_', '-')}")
    return settings


def _problem(err: dict) -> str:
    from localspec.profiles import describe_error

    return describe_error(err)
