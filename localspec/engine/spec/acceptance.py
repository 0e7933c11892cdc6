"""How likely a drafted token is to be kept: the estimators speculation decides with,
all behind one interface (``Estimator``).

Three kinds, for a stated reason: a draft model's acceptance depends on how deep into
one draft a token lies (its errors compound along the draft), an n-gram copy's on how
long the copy has gone on (thirty tokens that followed a source are an edited file
written out again; four may be a coincidence), measured as the run of output that
followed the short n-gram index's proposals or as the length of the match behind a
long copy. All pool positions in doubling bands, forget old evidence, and never let an
unjudged band look better than its prior on a guess.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from localspec.engine.spec.tuning import TUNING


class Estimator(Protocol):
    """What every drafter's acceptance answers. ``at`` is where a draft starts: the run
    position (RunAcceptance), the length of the match behind it (MatchAcceptance), 0 for
    a draft model (Acceptance: by depth in the draft); ``order`` the n-gram's length
    where it matters (the run's first position). The copies' estimators also judge single
output tokens as they come, for free (SpecState.emitted)."""

    def expected_tokens(self, at: int, k: int, order: int = 0) -> np.ndarray:
        """Tokens one step yields with 0..k drafts from ``at``: the kept prefix plus one."""
        ...

    def update(self, at: int, drafted: int, accepted: int, order: int = 0) -> None:
        """A draft from ``at`` verified: ``accepted`` of its ``drafted`` tokens kept."""
        ...


def bands(k: int) -> list[tuple[int, int]]:
    """Depths 1..k in doubling bands: (1, 1), (2, 2), (3, 4), (5, 8), (9, 16), ..."""
    out, lo, hi = [], 1, 1
    while lo <= k:
        out.append((lo, min(hi, k)))
        lo, hi = hi + 1, 2 * hi
    return out


class Acceptance:
    """A draft model's per-position acceptance rates alpha_i = P(draft i kept | drafts
    before it kept), with forgetting, so the estimate follows the text as it changes.

    Depths are pooled in bands that double (1, 2, 3-4, 5-8, 9-16, 17-32, 33-64): a draft
    that breaks at depth 10 says as much about depth 12 as about 10, and deep depths, each
    judged rarely, settle together. A band never judged gets the estimate of the band
    before it, but no better than the prior until that band was judged ``depth_sure``
    times per depth."""

    def __init__(self, prior: float, k_max: int, weight: float = TUNING.depth_weight,
                 decay: float = TUNING.decay) -> None:
        self.prior, self.weight, self.decay = prior, weight, decay
        self.tried = np.zeros(k_max + 1)
        self.kept = np.zeros(k_max + 1)
        self.deepest = 0  # the deepest position ever judged

    def update(self, at: int, drafted: int, accepted: int, order: int = 0) -> None:
        """A whole draft judged: ``accepted`` of its ``drafted`` tokens were kept (a draft
        always starts at depth 1: ``at`` is 0)."""
        if drafted == 0:
            return
        self.tried *= self.decay
        self.kept *= self.decay
        for depth in range(1, min(accepted + 1, drafted) + 1):  # positions actually judged
            if depth >= self.tried.size:
                break
            self.deepest = max(self.deepest, depth)
            self.tried[depth] += 1
            self.kept[depth] += depth <= accepted

    def rates(self, k: int) -> np.ndarray:
        out = np.empty(k)
        prev, sure = self.prior, True
        for lo, hi in bands(k):
            tried = float(self.tried[lo : hi + 1].sum())
            kept = float(self.kept[lo : hi + 1].sum())
            guess = prev if sure else min(prev, self.prior)
            prev = (kept + self.weight * guess) / (tried + self.weight)
            if tried > 0:  # a band never judged passes on what the one before had
                sure = tried >= TUNING.depth_sure * (hi - lo + 1)
            out[lo - 1 : hi] = prev
        return out

    def expected_tokens(self, at: int, k: int, order: int = 0) -> np.ndarray:
        """Tokens one step yields with 0..k drafts: the kept prefix plus one target token."""
        return np.concatenate(([1.0], 1.0 + np.cumsum(np.cumprod(self.rates(k)))))


def ngram_prior(n: int) -> float:
    """Acceptance expected of the first token an n-gram match proposes, before evidence."""
    priors = TUNING.first_priors
    return priors[min(n, len(priors)) - 1]


class RunAcceptance:
    """n-gram acceptance by place in the run: the output tokens in a row that followed
    the n-gram proposals so far (drafts kept, or proposals judged against the output).

    The rate at run position p is learnt from every token judged at p, pooled in
    doubling bands (1, 2, 3-4, 5-8, ..., 65-128, ...); position 1 per n-gram length. A
    draft of k tokens at run position r is costed with the rates of positions r+1..r+k:
    deep in a copy long drafts pay at once; a copy resumed after an edit starts again at
    position 1. Before evidence, a band gets its prior, but no more than the band before
    it has, unless that band is well judged, and then the higher of the two (a copy that
    has gone on is no likelier to stop than a younger one)."""

    BANDS = 16  # the last band holds every position past 2**14

    def __init__(self, decay: float = TUNING.decay) -> None:
        self.decay = decay
        self.tried = [0.0] * self.BANDS  # plain floats: read every step, a band at a time
        self.kept = [0.0] * self.BANDS
        self.first: dict[int, list[float]] = {}  # n-gram order -> [tried, kept] at position 1

    def begin(self) -> None:
        """A new proposal: older evidence weighs a little less."""
        d = self.decay
        self.tried = [t * d for t in self.tried]
        self.kept = [k * d for k in self.kept]
        for counts in self.first.values():
            counts[0] *= d
            counts[1] *= d

    def judge(self, position: int, kept: bool, order: int = 0) -> None:
        """The proposed token at run ``position`` (1-based) was judged."""
        if position <= 1:
            counts = self.first.setdefault(order, [0.0, 0.0])
            counts[0] += 1
            counts[1] += kept
            return
        band = min(self.BANDS - 1, (position - 1).bit_length())  # 2 -> 1, 3-4 -> 2, 5-8 -> 3, ...
        self.tried[band] += 1
        self.kept[band] += kept

    def update(self, run: int, drafted: int, accepted: int, order: int = 0) -> None:
        """A draft made at run position ``run`` judged: ``accepted`` of ``drafted`` kept."""
        if drafted == 0:
            return
        self.begin()
        for j in range(min(accepted + 1, drafted)):  # positions actually judged
            self.judge(run + 1 + j, j < accepted, order)

    def band_rates(self, order: int, n_bands: int = BANDS) -> list[float]:
        """The rates of the first ``n_bands`` bands (the choice of k runs this every step
        a proposal exists, so it stays in plain floats)."""
        w, priors = TUNING.run_weight, TUNING.run_priors
        tried, kept = self.first.get(order, (0.0, 0.0))
        prev = (kept + w * ngram_prior(order)) / (tried + w)
        out = [prev]
        sure = tried >= TUNING.run_sure
        for band in range(1, n_bands):
            prior = priors[min(band, len(priors)) - 1]
            guess = max(prior, prev) if sure else min(prior, prev)
            t = self.tried[band]
            prev = (self.kept[band] + w * guess) / (t + w)
            out.append(prev)
            sure = t >= TUNING.run_sure * (1 << (band - 1))
        return out

    def expected_tokens(self, run: int, k: int, order: int = 0) -> np.ndarray:
        """Tokens one step yields with 0..k drafts at run position ``run``."""
        last = run + k
        if last < _BAND_OF.size:
            band = _BAND_OF[run + 1 : last + 1]
        else:
            band = np.minimum(self.BANDS - 1, np.frexp(np.arange(run, last, dtype=float))[1])  # (p - 1).bit_length()
        rates = np.asarray(self.band_rates(order, int(band[-1]) + 1 if k else 1))[band]
        return np.concatenate(([1.0], 1.0 + np.cumsum(np.cumprod(rates))))


class MatchAcceptance:
    """Acceptance of a copy by the length of the match behind it: the chance that the
    text goes on following an earlier text it has followed for the last n tokens, in
    doubling bands of n (1, 2-3, 4-7, ..., 64+), each band on its own measured prior
    (TUNING.match_priors) and learnt per request from every drafted token judged. A
    token at depth j of a draft behind a match of n is judged at n + j - 1: deep in a
    long copy, every token of a long draft is likely kept."""

    BANDS = 7

    def __init__(self, decay: float = TUNING.decay, scale_prior: float | None = None) -> None:
        self.decay = decay
        # how much likelier to break than the priors this kind of copy is, before evidence
        self.scale_prior = TUNING.match_scale_prior if scale_prior is None else scale_prior
        self.tried = [0.0] * self.BANDS
        self.kept = [0.0] * self.BANDS

    @classmethod
    def band(cls, n: int) -> int:
        return min(cls.BANDS, max(1, n).bit_length()) - 1

    def update(self, n: int, drafted: int, accepted: int, order: int = 0) -> None:
        """A draft behind a match of ``n`` judged: ``accepted`` of ``drafted`` kept."""
        if drafted == 0:
            return
        self.tried = [t * self.decay for t in self.tried]
        self.kept = [k * self.decay for k in self.kept]
        for j in range(min(accepted + 1, drafted)):  # positions actually judged
            b = self.band(n + j)
            self.tried[b] += 1
            self.kept[b] += j < accepted

    def judge(self, n: int, kept: bool, order: int = 0) -> None:
        """One output token judged against what followed the earlier occurrence of a
        match of ``n``: every token is evidence, drafted or not."""
        d = TUNING.match_token_decay
        self.tried = [t * d for t in self.tried]
        self.kept = [k * d for k in self.kept]
        b = self.band(n)
        self.tried[b] += 1
        self.kept[b] += kept

    def expected_tokens(self, n: int, k: int, order: int = 0) -> np.ndarray:
        """Tokens one step yields with 0..k drafts behind a match of ``n``."""
        w, priors = TUNING.run_weight, TUNING.match_priors
        # How much likelier to break than the priors say this text has been, over every
        # band judged: a text whose short matches break often (boilerplate) is trusted
        # less on long ones before they are judged, a faithful copy more.
        expected = sum(t * (1.0 - p) for t, p in zip(self.tried, priors))
        failed = sum(t - k for t, k in zip(self.tried, self.kept))
        m = (failed + TUNING.match_scale_weight * self.scale_prior) / (expected + TUNING.match_scale_weight)
        by_band = [(self.kept[b] + w * max(0.0, 1.0 - m * (1.0 - priors[b]))) / (self.tried[b] + w)
                   for b in range(self.BANDS)]
        rates = np.array([by_band[self.band(n + j)] for j in range(k)])
        return np.concatenate(([1.0], 1.0 + np.cumsum(np.cumprod(rates))))


# The band of each run position (judge()'s (p - 1).bit_length(), capped), looked up, not
# computed, in the choice of k.
_BAND_OF = np.minimum(RunAcceptance.BANDS - 1, np.frexp(np.arange(-1, 1 << 13, dtype=float))[1]).astype(np.intp)
_BAND_OF[:2] = 0
