"""Reporting the benchmark: summaries by mode and draft length, and the JSON record."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field


@dataclass
class RunRecord:
    prompt: str
    kind: str
    mode: str  # off, or the speculative mode asked for
    draft_max: int | None
    tokens: int
    decode_tokens_per_s: float
    ratio: float  # to plain decoding of the same prompt
    ran: str  # what actually ran (off, ngram, draft, ngram+draft)
    drafted: int = 0
    accepted: int = 0
    acceptance_rate: float = 0.0
    mean_accepted_per_step: float = 0.0
    draft_lengths: dict[int, int] = field(default_factory=dict)
    identical: bool = True
    first_difference: int | None = None  # the first token that differs from plain's (llama-server: character)
    # The first character that differs from plain's text: llama-server's runs are compared
    # by text, so where both sides part from plain is told in characters.
    first_difference_char: int | None = None
    plain_margin: float | None = None  # plain run's top-2 logit gap at the first difference
    llama_cpp_tokens_per_s: float | None = None  # raw llama.cpp on the same prompt (plain rows)
    ratios: list[float] = field(default_factory=list)  # one per round (--repeat)


def first_difference(a: str, b: str) -> int:
    """Where two texts part, in characters (llama-server's tokens are not returned)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def summary(records: list[RunRecord]) -> dict[str, dict[str, float]]:
    """Per mode (and draft_max): mean, min and max of the ratio to plain."""
    groups: dict[str, list[float]] = {}
    for r in records:
        if r.mode == "off" or r.mode == "llama-server plain":
            continue
        groups.setdefault(f"{r.mode}@{r.draft_max}" if r.draft_max else r.mode, []).append(r.ratio)
    return {
        key: {
            "mean_ratio": round(statistics.fmean(v), 3),
            "min_ratio": round(min(v), 3),
            "max_ratio": round(max(v), 3),
        }
        for key, v in groups.items()
    }


def best_draft_max(records: list[RunRecord]) -> dict[str, int]:
    """For each mode, the draft_max with the highest mean ratio (for --sweep)."""
    best: dict[str, tuple[float, int]] = {}
    for key, s in summary(records).items():
        if "@" not in key:
            continue
        mode, dm = key.split("@")
        if mode not in best or s["mean_ratio"] > best[mode][0]:
            best[mode] = (s["mean_ratio"], int(dm))
    return {mode: dm for mode, (_, dm) in best.items()}


def against_llama(records: list[RunRecord]) -> dict[str, dict[str, object]]:
    """Per prompt: localspec's n-gram ratio against the best of llama-server's n-gram
    modes (each a ratio to its own plain run), when both were measured. Where neither
    side drafted a token, both ran plain and the ratio is the machine's noise (the best
    of two plain-against-plain medians favours llama-server): ``neither_drafted``. Where
    a text parts from its plain run's, the character it parts at (``parts_at``,
    ``llama_parts_at`` by mode): llama.cpp's own speculation parting at the same place
    shows that its batch kernels move the choice there, not localspec's verification."""
    out: dict[str, dict[str, object]] = {}
    for prompt in dict.fromkeys(r.prompt for r in records):
        ours = [r for r in records if r.prompt == prompt and r.mode == "ngram"]
        theirs = [r for r in records if r.prompt == prompt and r.mode.startswith("llama-server ngram")]
        if ours and theirs:
            best = max(theirs, key=lambda r: r.ratio)
            out[prompt] = {"localspec_ngram": round(ours[0].ratio, 3), "llama_best": best.mode.split(" ", 1)[1],
                           "llama_best_ratio": round(best.ratio, 3),
                           "ahead": round(ours[0].ratio / best.ratio, 3) if best.ratio else None,
                           "neither_drafted": ours[0].drafted == 0 and all(r.drafted == 0 for r in theirs),
                           "parts_at": ours[0].first_difference_char,
                           "llama_parts_at": {r.mode.split(" ", 1)[1]: r.first_difference_char for r in theirs
                                              if not r.identical}}
    return out


def geometric_mean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else 0.0


def by_kind(records: list[RunRecord]) -> dict[str, dict[str, float]]:
    """Per kind of prompt (a suite's category), the geometric mean of each mode's ratio to
    plain over the kind's prompts (llama-server's modes each to its own plain run), and
    how many prompts it has."""
    kinds: dict[str, dict[str, list[float]]] = {}
    lengths: dict[str, set] = {}
    for r in records:
        lengths.setdefault(r.mode, set()).add(r.draft_max)
    swept = {mode for mode, v in lengths.items() if len(v) > 1}  # --sweep: one key per draft_max
    for r in records:
        if r.mode in ("off", "llama-server plain"):
            continue
        key = f"{r.mode}@{r.draft_max}" if r.mode in swept else r.mode
        kinds.setdefault(r.kind, {}).setdefault(key, []).append(r.ratio)
    return {kind: {**{mode: round(geometric_mean(v), 3) for mode, v in modes.items()},
                   "prompts": max(len(v) for v in modes.values())}
            for kind, modes in kinds.items()}


def to_json(records: list[RunRecord], **meta: object) -> dict:
    return {
        **meta,
        "runs": [
            {**asdict(r), "draft_lengths": {str(k): v for k, v in r.draft_lengths.items()},
             "decode_tokens_per_s": round(r.decode_tokens_per_s, 2), "ratio": round(r.ratio, 3),
             "acceptance_rate": round(r.acceptance_rate, 4),
             "mean_accepted_per_step": round(r.mean_accepted_per_step, 3)}
            for r in records
        ],
        "summary": summary(records),
        "best_draft_max": best_draft_max(records),
        "against_llama_server": against_llama(records),
        "by_kind": by_kind(records),
    }
