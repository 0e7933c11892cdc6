"""Machine-readable records: the JSON that scripts read (its names are a contract)."""

from __future__ import annotations

from typing import Any

from localspec.types import Result


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
    if result.error:
        record["error"] = result.error
    return record
