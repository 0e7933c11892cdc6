"""Logits -> token, keeping the final distribution.

Speculative verification needs the exact distribution a token is drawn from (after every
processor and transform), so ``distribution`` returns it and ``Sampler.sample`` draws
from it. Logits processors (callables ``(tokens, logits) -> logits``, as mlx-lm's
``make_logits_processors``: a logit bias now, a grammar next) run first, on the output
so far; then the transforms in llama.cpp's default order: penalties, top-k, top-p,
min-p, then temperature. Candidates stay sparse (ids + probabilities): a full softmax over a 150k
vocabulary every token would cost more than the rest of the loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from localspec.types import SamplingParams

# For top-p without top-k, look at this many best tokens first; widen only if they do not
# reach the mass (rare), since sorting a whole vocabulary costs milliseconds.
_TOP_P_PREFILTER = 512
# Look for the k best tokens first among those within this many nats of the best logit.
_TOP_K_GAPS = (8.0, 16.0)


@dataclass(frozen=True)
class Distribution:
    """A probability distribution over ``ids`` (sorted by probability, highest first,
    except under plain temperature sampling where every id is a candidate)."""

    ids: np.ndarray  # int64
    probs: np.ndarray  # float64, sums to 1

    def prob(self, token: int) -> float:
        hit = np.nonzero(self.ids == token)[0]
        return float(self.probs[hit[0]]) if hit.size else 0.0

    def dense(self, n_vocab: int) -> np.ndarray:
        out = np.zeros(n_vocab, dtype=np.float64)
        out[self.ids] = self.probs
        return out


# (output tokens so far, logits) -> logits; must not change its input in place.
LogitsProcessor = Callable[[list[int], np.ndarray], np.ndarray]
BAN = -100.0  # a logit bias of -100 bans the token outright (OpenAI: "should ban")


def logit_bias_processor(bias: dict[int, float]) -> LogitsProcessor:
    """Add ``bias`` to the logits of its tokens; -100 makes a token impossible."""
    ids = np.fromiter(bias.keys(), dtype=np.int64, count=len(bias))
    values = np.fromiter((-np.inf if v <= BAN else v for v in bias.values()), dtype=np.float32, count=len(bias))

    def apply(tokens: list[int], logits: np.ndarray) -> np.ndarray:
        out = np.array(logits, dtype=np.float32, copy=True)
        out[ids] += values
        return out

    return apply


def make_logits_processors(params: SamplingParams) -> list[LogitsProcessor]:
    """The processors a request's sampling settings ask for."""
    return [logit_bias_processor(params.logit_bias)] if params.logit_bias else []


def one_hot(token: int) -> Distribution:
    return Distribution(np.array([token], dtype=np.int64), np.array([1.0]))


def apply_penalties(logits: np.ndarray, params: SamplingParams, history: list[int]) -> np.ndarray:
    """Repetition (llama.cpp style: divide positive logits, multiply negative ones),
    presence and frequency penalties over the last ``penalty_last_n`` tokens."""
    window = history[-params.penalty_last_n :] if params.penalty_last_n > 0 else history
    if not window or not params.penalized:
        return logits
    out = np.array(logits, dtype=np.float32, copy=True)
    ids, counts = np.unique(np.asarray(window, dtype=np.int64), return_counts=True)
    vals = out[ids]
    if params.repeat_penalty != 1.0:
        vals = np.where(vals > 0, vals / params.repeat_penalty, vals * params.repeat_penalty)
    vals = vals - counts * params.frequency_penalty - params.presence_penalty
    out[ids] = vals
    return out


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def distribution(
    logits: np.ndarray, params: SamplingParams, history: list[int] | None = None
) -> Distribution:
    """The distribution the next token is drawn from, after every transform.

    top-p and min-p each keep a prefix of the candidates sorted by probability, so they
    are computed together on untempered probabilities (as llama.cpp does) over a cheap
    superset of that prefix rather than a sort of the whole vocabulary.
    """
    logits = apply_penalties(logits, params, history or [])
    if params.greedy:
        return one_hot(int(np.argmax(logits)))
    n = logits.shape[0]
    if 0 < params.top_k < n:
        ids = _top_ids(logits, params.top_k)
        norm = _logsumexp(logits[ids])
    else:
        norm = _logsumexp(logits)
        if params.min_p > 0.0:
            above = np.flatnonzero(logits >= logits.max() + math.log(params.min_p))
            ids = above[np.lexsort((above, -logits[above]))]
        elif params.top_p < 1.0:
            ids = _top_ids(logits, min(n, _TOP_P_PREFILTER))
            if math.exp(_logsumexp(logits[ids]) - norm) < params.top_p:
                ids = _top_ids(logits, n)
        else:
            ids = np.arange(n, dtype=np.int64)
    cand = logits[ids].astype(np.float64)
    keep = ids.size
    if params.top_p < 1.0 or params.min_p > 0.0:
        p = np.exp(cand - norm)
        if params.top_p < 1.0:
            keep = min(keep, int(np.searchsorted(np.cumsum(p), params.top_p)) + 1)
        if params.min_p > 0.0:
            keep = min(keep, max(1, int(np.count_nonzero(p >= params.min_p * p[0]))))
    return Distribution(ids[:keep].astype(np.int64), _softmax(cand[:keep] / params.temperature))


def _top_ids(logits: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest logits, sorted descending (ties: lower id first).

    The k largest are found among the logits within a few nats of the best (they are
    among them whenever there are k of those, and a comparison is cheap), not by a
    partition of the whole vocabulary: numpy's argpartition takes 0.5 ms over 49k
    logits, 1.6 ms over 152k, a tenth of SmolLM2's decode step on a 2-core CPU."""
    n = logits.shape[0]
    if k >= n:
        return np.argsort(-logits, kind="stable").astype(np.int64)
    best = float(logits.max())
    for gap in _TOP_K_GAPS:
        cand = np.flatnonzero(logits >= best - gap)  # ascending ids
        if cand.size >= k:
            break
    else:
        cand = np.arange(n)
    vals = logits[cand]
    if cand.size > k:
        kth = np.partition(vals, cand.size - k)[cand.size - k]  # the k-th largest value
        above = cand[vals > kth]
        cand = np.concatenate([above, cand[vals == kth][: k - above.size]])  # ties: lower ids
    order = np.lexsort((cand, -logits[cand]))
    return cand[order].astype(np.int64)


def _logsumexp(x: np.ndarray) -> float:
    m = float(x.max())
    return m + math.log(float(np.exp(x - m, dtype=np.float64).sum()))


def top_probability(logits: np.ndarray) -> float:
    """The softmax probability of the most likely token (a draft's confidence)."""
    return math.exp(float(logits.max()) - _logsumexp(logits))


def top2_margin(logits: np.ndarray) -> float:
    """How far the best logit leads the second: under ~0.1 a numeric wobble can flip it."""
    top2 = np.partition(logits, -2)[-2:]
    return float(top2[1] - top2[0])


def logprob(logits: np.ndarray, token: int) -> float:
    """The model's own log-probability of ``token`` (before any transform)."""
    x = logits.astype(np.float64)
    return float(x[token] - _logsumexp(x))


def top_logprobs(logits: np.ndarray, n: int) -> tuple[tuple[int, float], ...]:
    """The model's own ``n`` most likely tokens with their log-probabilities, best first."""
    x = logits.astype(np.float64)
    norm = _logsumexp(x)
    return tuple((int(t), float(x[t] - norm)) for t in _top_ids(logits, n))


class Sampler:
    """Per-request sampling state: the seed, the penalty history, the output position.

    The token at output position i is drawn by inverse CDF with a uniform that depends on
    (seed, i) alone. So a seed gives the same text whether or not speculation ran and
    however many tokens were drafted at each step: verifying a one-hot draft (n-gram, or a
    greedy draft) is "draw as plain sampling would; keep the draft if it is that token"."""

    def __init__(self, params: SamplingParams, history: list[int] | None = None,
                 processors: list[LogitsProcessor] | None = None) -> None:
        self.params = params
        self.processors = make_logits_processors(params) + list(processors or [])
        # Masks (processors with ``allows``: a grammar) apart from the rest, split once here
        # rather than on every token.
        self._masks = [p for p in self.processors if hasattr(p, "allows")]
        self._plain = [p for p in self.processors if not hasattr(p, "allows")]
        self.output: list[int] = []  # what the processors see (kept only when there are some)
        # Any integer is a seed: mapped into numpy's range (negative seeds would raise).
        self.seed = params.seed % (1 << 64) if params.seed is not None else int(np.random.SeedSequence().entropy % (2**32))
        # Two independent streams: a leading 1 or 2 keeps them apart (numpy seeds (s, 0)
        # and s identically, so the draft's choices would otherwise echo position 0's).
        self.rng = np.random.default_rng((2, self.seed))  # the draft model's own choices
        self.history: list[int] = list(history or [])
        self.position = 0  # output tokens so far

    def distribution(self, logits: np.ndarray, extra: list[int] | None = None) -> Distribution:
        """The distribution after the accepted history plus ``extra`` tokens (drafts
        being verified, which the penalties and processors must see as if they were
        accepted).

        Under greedy decoding a mask (a processor with ``allows``: the grammar) is
        checked on the best token first and applied in full only when it refuses it, as
        llama.cpp's grammar sampler does: the argmax of the masked logits is the unmasked
        one whenever the mask allows that, so the token is the same, at 3 microseconds a
        check instead of 0.3 ms a full mask (150k vocabulary)."""
        history = (self.history + extra if extra else self.history) if self.params.penalized else None
        if not self.processors:
            return distribution(logits, self.params, history)
        seen = self.output + extra if extra else self.output
        for process in self._plain:
            logits = process(seen, logits)
        if self._masks and self.params.greedy:
            best = distribution(logits, self.params, history)
            if all(mask.allows(seen, int(best.ids[0])) for mask in self._masks):
                return best
        for mask in self._masks:
            logits = mask(seen, logits)
        return distribution(logits, self.params, history)

    def allowed_prefix(self, tokens: list[int]) -> int:
        """How many of ``tokens``, following the output so far, every processor that
        constrains allows (all of them when none does): a draft past that is rejected."""
        n = len(tokens)
        for process in self.processors:
            check = getattr(process, "allowed_prefix", None)
            if check is not None:
                n = min(n, check(self.output, tokens[:n]))
        return n

    def uniform(self, offset: int = 0) -> float:
        """The uniform for output position ``position + offset``."""
        return float(np.random.default_rng((1, self.seed, self.position + offset)).random())

    def draw(self, dist: Distribution, offset: int = 0) -> int:
        """Draw the token at output position ``position + offset`` from ``dist``."""
        if dist.ids.size == 1:
            return int(dist.ids[0])
        i = int(np.searchsorted(np.cumsum(dist.probs), self.uniform(offset), side="right"))
        return int(dist.ids[min(i, dist.ids.size - 1)])

    def draw_free(self, dist: Distribution) -> int:
        """Draw from the request's running generator (the draft model's proposals)."""
        if dist.ids.size == 1:
            return int(dist.ids[0])
        i = int(np.searchsorted(np.cumsum(dist.probs), self.rng.random(), side="right"))
        return int(dist.ids[min(i, dist.ids.size - 1)])

    def sample(self, logits: np.ndarray) -> tuple[int, Distribution]:
        """Draw the next token; returns it with the distribution it came from."""
        dist = self.distribution(logits)
        return self.draw(dist), dist

    def accept(self, token: int) -> None:
        """Record a token that became part of the output (position, penalties)."""
        self.position += 1
        if self.params.penalized:
            self.history.append(token)
        if self.processors:
            self.output.append(token)
