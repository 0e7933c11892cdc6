"""The built-in default of every setting, as plain values: what --help shows, without
loading pydantic (``settings.Settings`` declares the same defaults from here)."""

from __future__ import annotations

from typing import Any

from localspec.types import SamplingParams, SpecConfig

_SPEC, _SAMPLING = SpecConfig(), SamplingParams()

DEFAULTS: dict[str, Any] = {
    "model": None, "draft": None, "system": None, "json_schema": None, "source": None, "draft_source": None,
    "spec": _SPEC.mode, "draft_max": _SPEC.draft_max, "draft_min": _SPEC.draft_min,
    "draft_p_min": _SPEC.draft_p_min, "ngram_min": _SPEC.ngram_min, "ngram_max": _SPEC.ngram_max,
    "temperature": _SAMPLING.temperature, "top_k": _SAMPLING.top_k, "top_p": _SAMPLING.top_p,
    "min_p": _SAMPLING.min_p, "repeat_penalty": _SAMPLING.repeat_penalty,
    "presence_penalty": _SAMPLING.presence_penalty, "frequency_penalty": _SAMPLING.frequency_penalty,
    "seed": None, "max_tokens": None,
    "ctx_size": None, "slots": 1, "kv_type": "f16", "gpu_layers": "auto", "draft_gpu_layers": "auto",
    "threads": None, "prompt_cache": True, "prompt_cache_size": "4GiB",
}
