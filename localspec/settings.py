"""One place where settings are merged, in a documented order of precedence:

    command-line flag > environment variable (LOCALSPEC_*) > user profile
    > shipped profile > built-in default

Flags and environment variables reach here together from Typer (an option's ``envvar``),
each marked with where it came from; profiles add their layers below them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from localspec import profiles
from localspec.engine.speculate import SpecConfig
from localspec.resolve.names import looks_like_hub, looks_like_path
from localspec.types import SamplingParams

_SPEC, _SAMPLING = SpecConfig(), SamplingParams()

DEFAULTS: dict[str, Any] = {
    "model": None, "draft": None, "system": None,
    "spec": _SPEC.mode, "draft_max": _SPEC.draft_max, "draft_min": _SPEC.draft_min,
    "draft_p_min": _SPEC.draft_p_min, "ngram_min": _SPEC.ngram_min, "ngram_max": _SPEC.ngram_max,
    "temperature": _SAMPLING.temperature, "top_k": _SAMPLING.top_k, "top_p": _SAMPLING.top_p,
    "min_p": _SAMPLING.min_p, "repeat_penalty": _SAMPLING.repeat_penalty,
    "presence_penalty": _SAMPLING.presence_penalty, "frequency_penalty": _SAMPLING.frequency_penalty,
    "seed": None, "max_tokens": None,
    "ctx_size": None, "slots": 1, "kv_type": "f16", "gpu_layers": "auto", "draft_gpu_layers": "auto",
    "threads": None,
}


@dataclass
class Settings:
    values: dict[str, Any]
    sources: dict[str, str] = field(default_factory=dict)
    profile: str | None = None

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(name) from None

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


def is_profile_name(name: str) -> bool:
    return not looks_like_hub(name) and not looks_like_path(name) and profiles.exists(name)


def build(model: str | None, given: dict[str, tuple[Any, str]]) -> Settings:
    """``model`` as typed (a profile name, a model name, or None for the default profile);
    ``given``: option -> (value, "flag" | "env LOCALSPEC_X") for what was set."""
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
    return Settings(values, sources, profile)
