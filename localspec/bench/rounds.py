"""How many rounds the bench times a prompt in: ``repeat``, and more while the ratios
disagree too much for their median to resolve a few percent."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable

# The standard error of a median ratio above which another round is timed. On this 2-core
# EPYC a 128-token answer's round-to-round ratios of a mode that drafted nothing spread
# by a standard deviation of 2.3-2.6% (sb-mt-bench-121, 10 rounds), and by 13% when a
# neighbour stalled one plain run by a third (sb-mt-bench-81: 0.89-1.39); an 18-token
# answer's by 7% (sb-mt-bench-101, 30 rounds: 0.82-1.19). A 3-round median of the first
# kind is good to ~1.7%; one of the others could land anywhere from 0.9 to 1.1.
SETTLED_ERROR = 0.018
# At most this many times ``repeat`` rounds: the bench's time stays bounded.
ROUNDS_MAX = 3


def median_error(ratios: list[float]) -> float:
    """The standard error of the median of ``ratios``, from their spread (normal
    approximation, 1.2533 sd / sqrt(n)); infinite for fewer than two."""
    if len(ratios) < 2:
        return math.inf
    return 1.2533 * statistics.stdev(ratios) / math.sqrt(len(ratios))


def more_rounds(repeat: int, done: int, ratios: Iterable[list[float]]) -> bool:
    """Whether to time another round of a prompt after ``done`` rounds, given each
    variant's within-round ratios to plain so far: until ``repeat``, then (when repeating
    at all) while any variant's median is unsettled, up to ROUNDS_MAX x ``repeat``."""
    if done < max(1, repeat):
        return True
    if repeat <= 1 or done >= ROUNDS_MAX * repeat:
        return False
    return any(median_error(r) > SETTLED_ERROR for r in ratios)
