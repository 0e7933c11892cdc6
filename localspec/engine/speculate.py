"""Speculative decoding: drafters, lossless verification, and the draft length that pays.

A drafter proposes k tokens with the distribution q each was drawn from; the target
decodes its pending token plus the k drafts in one batch, and ``verify`` keeps a prefix of
them by exact rejection sampling, so the output has the target's own distribution (and
under greedy, is the target's own argmax sequence). ``choose_k`` picks, before each step,
the k that maximises expected tokens per second from measured costs and the request's
acceptance so far, including k = 0 when nothing beats plain decoding.
"""

from __future__ import annotations

import bisect
import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from localspec.engine.sampling import Distribution

MODES = ("off", "ngram", "draft", "auto")


@dataclass(frozen=True)
class SpecConfig:
    mode: str = "off"  # off | ngram | draft | auto (n-gram when it matches, else the draft)
    draft_max: int = 64  # an upper bound: the engine picks k each step from measured costs
    draft_min: int = 0  # when speculating, draft at least this many
    draft_p_min: float = 0.75  # stop drafting when the draft's top probability falls below
    ngram_min: int = 1
    ngram_max: int = 4
    adaptive: bool = True  # False: always draft draft_max (for measuring)


# ------------------------------------------------------------------------- verification


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


# ------------------------------------------------------------------------- drafters


class NgramIndex:
    """Prompt lookup: propose what followed an earlier occurrence of the last n tokens
    (n from n_max down to n_min). O(1) per token; a lookup is a dict hit and a bisect.

    Of several occurrences it takes the first after the ``cursor``, the place just past
    the text the last accepted draft was copied from, else the latest: an edited copy
    resumes where it left the source, and a common token ("(", " self") is otherwise
    found everywhere."""

    def __init__(self, tokens: list[int], n_min: int, n_max: int) -> None:
        self.n_min, self.n_max = n_min, n_max
        self.tokens: list[int] = []
        self.cursor = -1
        self._tables: dict[int, dict[tuple[int, ...], list[int]]] = {
            n: {} for n in range(n_min, n_max + 1)
        }
        self.extend(tokens)

    def extend(self, tokens: list[int]) -> None:
        toks = self.tokens
        for t in tokens:
            end = len(toks)  # the n-grams ending here are followed by t
            for n, table in self._tables.items():
                if end >= n:
                    key = tuple(toks[end - n : end])
                    starts = table.get(key)
                    if starts is None:
                        table[key] = [end]
                    else:
                        starts.append(end)
            toks.append(t)

    def propose(self, k: int) -> tuple[int, list[int], int]:
        """(n of the longest match, up to k tokens that followed it, where they start);
        (0, [], -1) if nothing matches."""
        toks, end = self.tokens, len(self.tokens)
        for n in range(self.n_max, self.n_min - 1, -1):
            if end < n:
                continue
            starts = self._tables[n].get(tuple(toks[end - n :]))
            if starts:
                i = bisect.bisect_right(starts, self.cursor) if self.cursor >= 0 else len(starts)
                start = starts[i] if i < len(starts) else starts[-1]
                return n, toks[start : start + k], start
        return 0, [], -1

    def accepted(self, start: int, count: int) -> None:
        """``count`` tokens proposed from ``start`` were kept: the copy continues there."""
        if count > 0:
            self.cursor = start + count


# ------------------------------------------------------------------------- the choice of k


class Acceptance:
    """A draft model's per-position acceptance rates alpha_i = P(draft i kept | drafts
    before it kept), with forgetting, so the estimate follows the text as it changes.

    Depths are pooled in bands that double (1, 2, 3-4, 5-8, 9-16, 17-32, 33-64): a draft
    that breaks at depth 10 says as much about depth 12 as about 10, and deep depths, each
    judged rarely, settle together. A band never judged gets the estimate of the band
    before it, but no better than the prior until that band was judged SURE times per
    depth: a long draft on one lucky short one costs several plain steps where batches
    are dear."""

    SURE = 1.5  # judgements (decayed) per depth a band needs before the next may inherit above the prior

    def __init__(self, prior: float, k_max: int, weight: float = 2.0, decay: float = 0.97) -> None:
        self.prior, self.weight, self.decay = prior, weight, decay
        self.tried = np.zeros(k_max + 1)
        self.kept = np.zeros(k_max + 1)
        self.deepest = 0  # the deepest position ever judged

    def update(self, drafted: int, accepted: int) -> None:
        """A whole draft judged: ``accepted`` of its ``drafted`` tokens were kept."""
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
        for lo, hi in _bands(k):
            tried = float(self.tried[lo : hi + 1].sum())
            kept = float(self.kept[lo : hi + 1].sum())
            guess = prev if sure else min(prev, self.prior)
            prev = (kept + self.weight * guess) / (tried + self.weight)
            if tried > 0:  # a band never judged passes on what the one before had
                sure = tried >= self.SURE * (hi - lo + 1)
            out[lo - 1 : hi] = prev
        return out

    def expected_tokens(self, k: int) -> np.ndarray:
        """Tokens one step yields with 0..k drafts: the kept prefix plus one target token."""
        return np.concatenate(([1.0], 1.0 + np.cumsum(np.cumprod(self.rates(k)))))


def _bands(k: int) -> list[tuple[int, int]]:
    """Depths 1..k in doubling bands: (1, 1), (2, 2), (3, 4), (5, 8), (9, 16), ..."""
    out, lo, hi = [], 1, 1
    while lo <= k:
        out.append((lo, min(hi, k)))
        lo, hi = hi + 1, 2 * hi
    return out


def ngram_prior(n: int) -> float:
    """Acceptance expected of the first token an n-gram match proposes, before any
    evidence: a single matching token says little, four say more."""
    return {1: 0.2, 2: 0.3, 3: 0.4}.get(n, 0.5)


class RunAcceptance:
    """n-gram acceptance by place in the run: the output tokens in a row that followed
    the n-gram proposals so far (drafts kept, or proposals judged against the output).

    Whether the next proposed token is kept depends less on how deep into one draft it
    lies than on how long the copy has gone on: four tokens that follow a source may be a
    coincidence, thirty are an edited file being written out again. So the rate at run
    position p is learnt from every token judged at p, pooled in doubling bands (1, 2,
    3-4, 5-8, ..., 65-128, ...); position 1 per n-gram length. A draft of k tokens at run
    position r is costed with the rates of positions r+1..r+k: deep in a copy long drafts
    pay at once; a copy resumed after an edit starts again at position 1. Before evidence,
    a band gets its prior, but no more than the band before it has (a summary's copied
    phrases end within a few tokens: the first run to reach 17 must not be drafted on a
    prior of 0.97), unless that band is well judged, and then the higher of the two (a
    copy that has gone on is no likelier to stop than a younger one). The priors are on
    the low side for short runs, where a coincidence is common and a long draft on it
    costs several plain steps, and high past 16 tokens, where text rarely follows a
    source by chance."""

    PRIORS = (0.3, 0.5, 0.7, 0.8, 0.97)  # run positions 2, 3-4, 5-8, 9-16, 17 on
    BANDS = 16  # the last band holds every position past 2**14
    WEIGHT = 3.0  # the prior counts as this many judgements
    SURE = 1.5  # judgements (decayed) per position for a band to pass its rate on

    def __init__(self, decay: float = 0.97) -> None:
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

    def judge(self, position: int, kept: bool, order: int) -> None:
        """The proposed token at run ``position`` (1-based) was judged."""
        if position <= 1:
            counts = self.first.setdefault(order, [0.0, 0.0])
            counts[0] += 1
            counts[1] += kept
            return
        band = min(self.BANDS - 1, (position - 1).bit_length())  # 2 -> 1, 3-4 -> 2, 5-8 -> 3, ...
        self.tried[band] += 1
        self.kept[band] += kept

    def update(self, run: int, drafted: int, accepted: int, order: int) -> None:
        """A draft made at run position ``run`` judged: ``accepted`` of ``drafted`` kept."""
        if drafted == 0:
            return
        self.begin()
        for j in range(min(accepted + 1, drafted)):  # positions actually judged
            self.judge(run + 1 + j, j < accepted, order)

    def band_rates(self, order: int, bands: int = BANDS) -> list[float]:
        """The rates of the first ``bands`` bands (the choice of k runs this every step
        a proposal exists, so it stays in plain floats)."""
        w = self.WEIGHT
        tried, kept = self.first.get(order, (0.0, 0.0))
        prev = (kept + w * ngram_prior(order)) / (tried + w)
        out = [prev]
        sure = tried >= self.SURE
        for band in range(1, bands):
            prior = self.PRIORS[min(band, len(self.PRIORS)) - 1]
            guess = max(prior, prev) if sure else min(prior, prev)
            t = self.tried[band]
            prev = (self.kept[band] + w * guess) / (t + w)
            out.append(prev)
            sure = t >= self.SURE * (1 << (band - 1))
        return out

    def expected_tokens(self, run: int, k: int, order: int) -> np.ndarray:
        """Tokens one step yields with 0..k drafts at run position ``run``."""
        last = run + k
        if last < _BAND_OF.size:
            bands = _BAND_OF[run + 1 : last + 1]
        else:
            bands = np.minimum(self.BANDS - 1, np.frexp(np.arange(run, last, dtype=float))[1])  # (p - 1).bit_length()
        rates = np.asarray(self.band_rates(order, int(bands[-1]) + 1 if k else 1))[bands]
        return np.concatenate(([1.0], 1.0 + np.cumsum(np.cumprod(rates))))


# The band of each run position (judge()'s (p - 1).bit_length(), capped), looked up, not
# computed, in the choice of k.
_BAND_OF = np.minimum(RunAcceptance.BANDS - 1, np.frexp(np.arange(-1, 1 << 13, dtype=float))[1]).astype(np.intp)
_BAND_OF[:2] = 0


class Costs:
    """What a target decode of b tokens and a draft step cost here, measured: calibrated
    at start (or remembered from an earlier run), then followed online. A machine's speed
    drifts by tens of percent within minutes (clocks, neighbours) while the shape of its
    costs (what b tokens cost against one) holds, and single decodes are timed every few
    steps but a batch of 64 perhaps once a minute: so T(1) is followed as the median of
    its last WINDOW decodes, and every other size as the median of its last WINDOW ratios
    to the T(1) of its time. T(b) is that ratio times today's T(1). Kept in seconds, a
    batch timed in a fast minute would look cheap against single decodes of a slow one,
    and the choice of k would follow the clock instead of the costs. A median shrugs off
    the spikes a busy machine throws, and a remembered value is one vote: two fresh
    decodes outvote it, so a figure from a slower hour cannot keep a batch size from ever
    being tried again."""

    WINDOW = 15
    TABLE = 65  # sizes tabled at least: the longest draft's batch at the default --draft-max

    def __init__(self) -> None:
        self._obs: dict[int, deque[float]] = {}  # size 1: seconds; others: ratios to T(1)
        self._ratio: dict[int, float] = {}  # median ratio to T(1) by size (1.0 for size 1)
        self.t1 = 0.0  # seconds per single-token decode now
        self._shape: np.ndarray | None = None  # T(b) / T(1) for b = 1, 2, ...
        self._shaped: dict[int, float] = {}  # the ratios the shape was built from
        self.draft_step = 0.0  # seconds per draft decode (all slots together)
        self.draft_per_token = 0.0  # seconds per drafted token, whole phases measured
        self._phase_s = 0.0
        self._phase_n = 0.0

    def set_target(self, b: int, seconds: float) -> None:
        """A figure timed now (calibration) or remembered, replacing what was observed of
        its size: size 1 first, since the others are kept as ratios to it."""
        self._obs.pop(b, None)
        self.observe_target(b, seconds)

    def _guess_t1(self, b: int, seconds: float) -> None:
        """A batch timed before any single decode (all slots busy since the start): T(1)
        guessed as if b tokens cost b decodes, the guess under which nothing is drafted,
        one vote that the first single decodes outvote."""
        if self.t1 <= 0:
            self.set_target(1, seconds / b)

    def observe_target(self, b: int, seconds: float) -> None:
        window = self._obs.setdefault(b, deque(maxlen=self.WINDOW))
        if b == 1:
            window.append(seconds)
            self.t1 = statistics.median(window)
            self._ratio[1] = 1.0
            return
        self._guess_t1(b, seconds)
        window.append(seconds / self.t1)
        self._ratio[b] = new = statistics.median(window)
        shaped = self._shaped.get(b)
        if shaped is None or abs(new - shaped) > 0.01 * shaped:  # the shape follows moves over 1%
            self._shape = None

    def table(self, n: int) -> np.ndarray:
        """[T(1), ..., T(n)] in seconds as an array (index b - 1): the choice of k reads it
        every step, for every k, so the shape is rebuilt only when a ratio moves."""
        if self._shape is None or self._shape.size < n:
            self._shape = self._build(max(n, self.TABLE))
            self._shaped = dict(self._ratio)
        return self._shape[:n] * (self.t1 if self.t1 > 0 else 1.0)

    def pad_to(self, b: int, limit: int) -> int:
        """How many rows to decode b rows as: b, or the larger size up to ``limit`` that
        was measured cheaper than b itself. CPU kernels work in tiles, and a batch just
        short of one costs more than the whole tile (here 63 rows 1.24 times 64, 31 rows
        1.1 times 32), so the engine pads such a batch with rows that want no logits. The
        cost table assumes it: a size never costs more than a larger one."""
        ratio = self._ratio.get(b)
        if ratio is None or b <= 1:
            return b  # never timed: timed as it is, once
        cheaper = [(r, size) for size, r in self._ratio.items() if b < size <= limit and r < ratio]
        return min(cheaper)[1] if cheaper else b  # the cheapest; of equals, the smallest

    def observe_draft(self, seconds: float) -> None:
        self.draft_step = seconds if self.draft_step == 0 else 0.9 * self.draft_step + 0.1 * seconds

    def observe_drafting(self, seconds: float, drafted: int) -> None:
        """A whole draft phase: catch-up, every draft decode, and decodes whose token the
        confidence cut (--draft-p-min) threw away. Its cost per drafted token is what a
        draft really costs, and what the choice of k weighs."""
        self._phase_s = self._phase_s * 0.9 + seconds
        self._phase_n = self._phase_n * 0.9 + drafted
        self.draft_per_token = self._phase_s / max(self._phase_n, 1.0)

    @property
    def draft_token(self) -> float:
        """Seconds per drafted token: measured per phase once known, else one step; never
        more than three steps (a phase that cost more was not steady-state drafting)."""
        per_token = min(self.draft_per_token, 3 * self.draft_step) if self.draft_step else self.draft_per_token
        return max(per_token, self.draft_step)

    def target(self, b: int) -> float:
        return float(self.table(b)[b - 1])

    def _build(self, n: int) -> np.ndarray:
        """Cost of a target decode of b = 1..n tokens against one: measured, else what the next
        measured size costs (extrapolated past the largest), then held to what must be
        true: never more than a larger batch costs, and never more than b single decodes
        (a stale or unlucky figure breaks these). An unmeasured size is not a line between
        two measured ones: kernels work in tiles (here 31 rows cost more than 32, 63 than 64)."""
        b = np.arange(1, n + 1)
        if not self._ratio:  # nothing measured yet: a cautious guess, roughly a CPU's shape
            return 1.0 + 0.15 * (b - 1.0)
        sizes = np.array(sorted(self._ratio))
        t = np.array([self._ratio[int(x)] for x in sizes])
        last = sizes[-1]
        if sizes.size >= 2:
            slope = max(0.0, (t[-1] - t[-2]) / (last - sizes[-2]))
            beyond = t[-1] + slope * (b - last)
        else:
            beyond = t[-1] * b / last
        at_or_above = np.searchsorted(sizes, b, side="left")
        out = np.where(at_or_above < sizes.size, t[np.minimum(at_or_above, sizes.size - 1)], beyond)
        larger_min = np.append(np.minimum.accumulate(t[::-1])[::-1], np.inf)  # min over sizes[i:]
        out = np.minimum(out, larger_min[np.searchsorted(sizes, b, side="right")])
        if sizes[0] == 1:
            out = np.minimum(out, b * t[0])
        return out

    def snapshot(self) -> dict[int, float]:
        """Seconds by measured size, at today's T(1): as measured, not as the table holds
        them (a size just short of a tile costs more than the tile, and is padded to it)."""
        if self.t1 <= 0:
            return {}
        return {b: self._ratio[b] * self.t1 for b in sorted(self._ratio)}

    def to_dict(self) -> dict:
        return {"target": {str(b): t for b, t in self.snapshot().items()}, "draft_step": self.draft_step,
                "draft_per_token": self.draft_per_token}

    @classmethod
    def from_dict(cls, data: dict) -> Costs:
        costs = cls()
        for b, t in sorted((int(b), float(t)) for b, t in data.get("target", {}).items()):
            costs.set_target(b, t)
        costs.draft_step = float(data.get("draft_step", 0.0))
        costs.draft_per_token = float(data.get("draft_per_token", 0.0))
        return costs


# A draft must be expected to beat plain decoding by this much. The best of many k is
# chosen on estimates, so the one chosen is more often over- than under-estimated (the
# winner's curse); near the line that turns an expected tie into a loss.
PAY_MARGIN = 1.05


def choose_k(expected: np.ndarray, costs: Costs, *, k_min: int = 0, draft_cost: float = 0.0) -> int:
    """The draft length with the most expected tokens per second; 0 if none beats plain
    decoding. ``expected[k]`` is the tokens a step yields with k drafts (k = 0 up to the
    longest allowed), ``draft_cost`` the time to draft one token (0 for n-gram lookup)."""
    k_max = expected.size - 1
    k_lo = max(1, k_min)
    if k_max < k_lo:
        return 0
    ks = np.arange(k_lo, k_max + 1)
    t = costs.table(k_max + 1)
    rates = expected[ks] / (t[ks] + ks * draft_cost)  # t[k] is T(k + 1)
    best = int(np.argmax(rates))
    return int(ks[best]) if rates[best] > PAY_MARGIN / t[0] else 0


def growth_limit(acceptance: Acceptance, k_max: int) -> int:
    """A draft model's depths never judged are only estimates: its drafts grow to at most
    twice the deepest position seen (a failed guess at k = 16 costs several plain steps,
    and the draft model's own time)."""
    return min(k_max, max(4, 2 * acceptance.deepest))


def draft_can_pay(costs: Costs, k_max: int, alpha: float = 0.95, margin: float = 1.02) -> bool:
    """Could a draft model beat plain decoding here at all, even at a high acceptance?
    Trying it costs a prefill of the whole context in the draft, so where even alpha = 0.95
    would not win by ``margin`` (a draft step near a target step's cost, as on small CPUs
    with a same-family pair), the draft model is never tried."""
    k = np.arange(1, k_max + 1)
    expected = (1.0 - alpha ** (k + 1)) / (1.0 - alpha)
    t = costs.table(k_max + 1)
    best = float(np.max(expected / (t[k] + k * costs.draft_token)))  # t[k] is T(k + 1)
    plain = 1.0 / t[0]
    return best > plain * margin


@dataclass
class Shadow:
    """An n-gram proposal that was not drafted, judged against the tokens that follow.

    Under greedy decoding the tokens a verification would have kept are exactly the
    proposal's common prefix with the output; under sampling with a one-hot q a draft x is
    kept with probability p(x), the chance that the output token is x. So an undrafted
    proposal measures the acceptance it would have had, at every depth, for free: the
    choice of k learns where drafting would pay without paying for a failed draft (on a
    CPU where only long drafts pay, short probes could never show it)."""

    order: int  # the n-gram length it was proposed on
    tokens: list[int]
    start: int  # where in the index the proposal was copied from
    matched: int = 0


@dataclass
class SlotSpec:
    """One request's speculation state: its n-gram index, acceptance, and stats."""

    ngram: NgramIndex | None
    accept_ngram: RunAcceptance  # by place in the run of output that followed the proposals
    accept_draft: Acceptance
    kept_in_a_row: int = 0  # the run: output tokens in a row that followed n-gram proposals
    ngram_start: int = -1  # where the last n-gram proposal was copied from
    drafted: int = 0
    accepted: int = 0
    steps: int = 0
    ngram_drafted: int = 0
    model_drafted: int = 0
    lengths: dict[int, int] = field(default_factory=dict)
    idle_steps: int = 0  # steps since the last draft, for probing
    probe_every: int = 16
    probing: bool = False
    draft_s: float = 0.0
    verify_s: float = 0.0
    sample_s: float = 0.0
    shadow: Shadow | None = None
    shadowed: int = 0  # proposals judged without drafting

    def shadow_proposal(self, order: int, tokens: list[int], start: int) -> None:
        """Judge an undrafted n-gram proposal against the coming output: one at a time
        (a token is evidence once), replaced when a longer or shorter match proposes."""
        if self.shadow is None or self.shadow.order != order:
            self.accept_ngram.begin()
            self.shadow = Shadow(order, tokens, start)
            self.shadowed += 1

    def emitted(self, token: int) -> None:
        """A token of the output: indexed for lookup, and judged against the shadow as it
        comes (evidence at once, not after a whole proposal's worth of steps)."""
        if self.ngram is not None:
            self.ngram.extend([token])
        shadow = self.shadow
        if shadow is None:
            return
        kept = token == shadow.tokens[shadow.matched]
        self.accept_ngram.judge(self.kept_in_a_row + 1, kept, shadow.order)
        if kept:
            shadow.matched += 1
            self.kept_in_a_row += 1
            if self.ngram is not None:
                self.ngram.accepted(shadow.start, shadow.matched)
        else:
            self.kept_in_a_row = 0
        if not kept or shadow.matched == len(shadow.tokens):
            self.shadow = None

    def _extend_run(self, drafted: int, accepted: int) -> None:
        self.kept_in_a_row = self.kept_in_a_row + accepted if accepted == drafted else 0

    def record(self, kind: str, drafted: int, accepted: int, order: int = 0) -> None:
        self.steps += 1
        self.lengths[drafted] = self.lengths.get(drafted, 0) + 1
        if drafted == 0:
            self.idle_steps += 1
            return
        self.drafted += drafted
        self.accepted += accepted
        if kind == "ngram":
            self.ngram_drafted += drafted
            self.accept_ngram.update(self.kept_in_a_row, drafted, accepted, order)
            self._extend_run(drafted, accepted)
        else:
            self.model_drafted += drafted
            self.accept_draft.update(drafted, accepted)
        if self.probing:  # a probe that did not restart drafting: wait twice as long
            self.probe_every = min(self.probe_every * 2, 256)
            self.probing = False
        else:
            self.probe_every = 16
        self.idle_steps = 0

    @property
    def mode(self) -> str:
        kinds = [n for n, c in (("ngram", self.ngram_drafted), ("draft", self.model_drafted)) if c]
        return "+".join(kinds) if kinds else "off"

    def should_probe(self) -> bool:
        """Draft once anyway after a while without drafts, so that the acceptance estimate
        can notice that the text changed; each probe that changes nothing doubles the wait."""
        self.probing = self.idle_steps >= self.probe_every
        return self.probing
