"""Machine-readable records: the JSON that scripts read (its names are a contract)."""

from __future__ import annotations

from typing import Any

from localspec.types import Result, SpecStats


def result_record(result: Result, *, model: str, load_s: float) -> dict[str, Any]:
    t, u = result.timings, result.usage
    record: dict[str, Any] = {
        "model": model,
        "text": result.text,
        "finish_reason": result.finish_reason.value,
        "usage": {
            "prompt_tokens": u.prompt_tokens,
            "completion_tokens": u.completion_tokens,
            "cached_tokens": u.cached_tokens,
        },
        "timings": {
            "load_s": round(load_s, 4),
            "prompt_s": round(t.prompt_s, 4),
            "decode_s": round(t.decode_s, 4),
            "decode_tokens_per_s": round(t.decode_tokens_per_s, 2),
        },
    }
    if result.spec is not None:
        record["spec_stats"] = spec_record(result.spec)
    if result.error:
        record["error"] = result.error
    return record


def spec_record(spec: SpecStats) -> dict[str, Any]:
    return {
        "mode": spec.mode,
        "drafted": spec.drafted,
        "accepted": spec.accepted,
        "acceptance_rate": round(spec.acceptance_rate, 4),
        "mean_accepted_per_step": round(spec.mean_accepted_per_step, 4),
        "steps": spec.steps,
        "draft_lengths": {str(k): n for k, n in spec.draft_lengths.items()},
        "draft_s": round(spec.draft_s, 4),
        "verify_s": round(spec.verify_s, 4),
        "sample_s": round(spec.sample_s, 4),
    }
