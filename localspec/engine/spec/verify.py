"""Lossless verification: keep a prefix of the drafts by exact rejection sampling.

A drafter proposes k tokens with the distribution q each was drawn from; the target
decodes its pending token plus the k drafts in one batch, and ``verify`` keeps a prefix
of them so that the output has the target's own distribution (under greedy, the
target's own argmax sequence). p is the distribution after the request's own logits
processors and transforms, so a logit bias or a grammar keeps it lossless.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from localspec.engine.sampling import Distribution


def residual(p: Distribution, q: Distribution) -> Distribution:
    """norm(max(0, p - q)): where to sample from after rejecting a draft drawn from q."""
    size = int(max(p.ids.max(), q.ids.max())) + 1
    dense_q = np.zeros(size)
    dense_q[q.ids] = q.probs
    r = np.clip(p.probs - dense_q[p.ids], 0.0, None)
    total = r.sum()
    if total <= 0.0:  # p == q: rejection had probability 0; keep p
        return p
    return Distribution(p.ids, r / total)


def verify(
    drafts: list[int],
    qs: list[Distribution],
    target: Callable[[int], Distribution],
    rng: np.random.Generator,
    draw: Callable[[Distribution, int], int],
) -> tuple[int, int]:
    """Accept a prefix of ``drafts``; return (how many were accepted, the next token).

    ``target(i)`` is the target's distribution after the pending token and drafts[:i], and
    ``draw(dist, i)`` draws output position i as plain sampling would. Draft x_i is kept
    with probability min(1, p(x)/q(x)); on rejection the next token comes from
    norm(max(0, p - q)); if all are kept, a bonus token comes from p. For a one-hot q
    (n-gram, greedy draft) that rule is exactly "draw y_i as plain sampling would and keep
    x_i if y_i == x_i", which is how it runs: same seed, same text as plain decoding."""
    for i, x in enumerate(drafts):
        p = target(i)
        q = qs[i]
        if q.ids.size == 1:
            y = draw(p, i)
            if y == x:
                continue
            return i, y
        px, qx = p.prob(x), q.prob(x)
        if px >= qx or rng.random() * qx < px:
            continue
        return i, draw(residual(p, q), i)
    return len(drafts), draw(target(len(drafts)), len(drafts))
