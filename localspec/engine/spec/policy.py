"""The speculation policy: for each slot and step, which drafter proposes and how many
tokens it drafts (the k that pays, from measured costs and the request's acceptance so
far), including none when nothing beats plain decoding; probes; the draft model's batch.

It reads an explicit per-slot view (``SlotView``) built by the scheduler, never the
scheduler's own slot, and returns typed proposals; each request's own state (its
estimators, ledger, tally) is a ``SpecState`` (state.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from localspec.engine.sampling import Distribution, Sampler, one_hot, top_probability
from localspec.engine.spec.acceptance import Acceptance
from localspec.engine.spec.copy import CopyTracker
from localspec.engine.spec.costs import Costs, calibrate
from localspec.engine.spec.draftmodel import DraftJob, DraftModel, Pick
from localspec.engine.spec.ledger import Ledger
from localspec.engine.spec.ngram import NgramIndex
from localspec.engine.spec.patch import Tokenizer, diff_hints
from localspec.engine.spec.state import Proposal, SpecState, agreeing
from localspec.engine.spec.store import Store
from localspec.engine.spec.suffix import SuffixIndex
from localspec.engine.spec.tuning import TUNING
from localspec.types import SpecConfig


@dataclass
class SlotView:
    """What the policy sees of a generating slot this step."""

    seq: int
    tokens: list[int]  # what the slot's KV cache holds
    pending: int  # sampled, not yet decoded
    room: int  # tokens the request may still produce after the pending one
    state: SpecState
    sampler: Sampler


class SpecPolicy:
    def __init__(self, draft: DraftModel | None, costs: Costs | None = None, batch_capacity: int = 512) -> None:
        self.draft = draft
        self.batch_capacity = batch_capacity  # the target batch holds every slot's drafts
        self.costs = costs or Costs()
        self.calibrated = costs is not None  # measured now or remembered: worth saving
        self.store: Store | None = None  # earlier requests' texts, where the engine keeps them
        self.tokenizer: Tokenizer | None = None  # the target's: to apply a prompt's diffs (spec/patch.py)

    def start(self, prompt: list[int], config: SpecConfig, store_key: str = "") -> SpecState | None:
        """A new request's speculation state (None: it runs plain)."""
        drafters = "ngram" if config.mode == "auto" and self.draft is None else config.mode
        if drafters == "off":
            return None
        recall = self.store.recall(store_key, prompt) if self.store and config.share and drafters != "draft" else None
        copies = drafters in ("ngram", "auto")
        hint = diff_hints(self.tokenizer, prompt) if copies and self.tokenizer is not None else []
        return SpecState(
            recall=recall,
            copy=CopyTracker(SuffixIndex(prompt + hint), TUNING.long_match, len(prompt) + len(hint), hint=len(hint))
            if copies else None,
            config=config,
            drafters=drafters,
            ngram=NgramIndex(prompt, config.ngram_min, config.ngram_max) if drafters in ("ngram", "auto") else None,
            accept_draft=Acceptance(prior=TUNING.draft_prior, k_max=config.draft_max),
        )

    def remember(self, store_key: str, spec: SpecState | None) -> None:
        """A request ended: its prompt and output join the store its key searches."""
        if self.store is not None and spec is not None and spec.config.share and spec.ngram is not None:
            self.store.add(store_key, spec.ngram.tokens)

    def propose(self, slots: list[SlotView], generating: int | None = None) -> dict[int, Proposal]:
        """Proposals by sequence id: n-gram lookups at once, the draft model's jobs in one
        batch per draft position. ``generating``: the slots whose pending token is in the
        target batch (plain ones too). Each slot drafts at most its share of the rows
        left, and its k is chosen for the batch as it stands (``_Batch``): what its extra
        rows cost on top of the others'."""
        proposals: dict[int, Proposal] = {}
        jobs: list[DraftJob] = []
        generating = len(slots) if generating is None else generating
        share = (self.batch_capacity - generating) // max(1, len(slots))
        self._batch = _Batch(self.costs, generating, self.batch_capacity)
        for slot in slots:
            spec = slot.state
            room = min(spec.config.draft_max, share, slot.room)
            if room <= 0:
                continue
            if spec.ngram is not None:
                for order, tokens, start, source in self._copies(spec, room):  # the first that pays
                    if tokens and slot.sampler is not None:  # cut where the request's constraint rejects it
                        tokens = tokens[: slot.sampler.allowed_prefix(tokens)]
                    if not tokens:
                        continue
                    judged = spec.judged(source, order, start)
                    expected = judged.expected_tokens(len(tokens))
                    k = self._choose(spec, len(tokens), expected, 0.0, evidence=judged.at)
                    if k:
                        proposals[slot.seq] = Proposal("ngram", tokens[:k], [one_hot(t) for t in tokens[:k]], order,
                                                       start, source)
                        spec.shadow = None
                        break
                    if source == "ngram":
                        spec.shadow_proposal(order, tokens, start)  # judged on the output instead
                if slot.seq in proposals or spec.drafters == "ngram":
                    continue
            # auto: the draft model where the n-gram lookup has nothing that pays
            if self.draft is not None and spec.drafters in ("draft", "auto") and self._draft_pays(spec.config):
                gap = len(slot.tokens) + 1 - self.draft.cached(slot.seq, slot.tokens)
                expected = spec.judged("draft").expected_tokens(growth_limit(spec.accept_draft, room))
                k = self._choose(spec, room, expected, self.costs.draft_token, probe=gap)
                if k:
                    jobs.append(DraftJob(slot.seq, slot.tokens + [slot.pending], k,
                                         _picker(slot.sampler, spec.config.draft_p_min), spec.config.draft_p_min))
        if jobs:
            t0 = time.perf_counter()
            caught_up = self.draft.draft(jobs, self.costs.observe_draft)
            # A phase that first fed the draft a prompt is a one-off prefill, not what
            # drafting costs: counted, one would keep the draft model off for good.
            if caught_up <= TUNING.steady_catch_up * len(jobs):
                self.costs.observe_drafting(time.perf_counter() - t0, sum(len(j.drafts) for j in jobs))
            for job in jobs:
                proposals[job.seq] = Proposal("draft", job.drafts, job.qs)
        return proposals

    @staticmethod
    def _copies(spec: SpecState, room: int) -> Iterator[tuple[int, list[int], int, Literal["ngram", "match", "store"]]]:
        """The copies to propose, best evidence first: the longest match in an earlier
        request's text (see SpecState.stored_part), the copy of the request's own text
        it follows (with the edits it made so far), each when long; then the short
        n-gram index's, cut where it contradicts the copy, which is still tried (and
        judged) when a long copy does not pay. (match length, tokens, start, source)"""
        n_own, own_tokens, own_start = spec.copy.propose(room) if spec.copy is not None else (0, [], -1)
        own = n_own >= TUNING.long_match and own_tokens
        if spec.recall is not None:  # an earlier request's text: where the request's own copy does not know better
            n, recalled = spec.recall.draft(room)
            if n >= TUNING.store_min_match and recalled:
                stored = spec.stored_part(recalled, own_tokens, n >= n_own) if own else recalled if n > n_own else []
                if stored:
                    yield n, stored, -1, "store"
        if own:
            yield n_own, own_tokens, own_start, "match"
        order, tokens, start = spec.ngram.propose(room)
        if own_tokens:  # the copy's longer evidence overrules a short n-gram where they differ
            tokens = tokens[: agreeing(tokens, own_tokens)]
        yield order, tokens, start, "ngram"

    def _draft_pays(self, config: SpecConfig) -> bool:
        """Whether the draft model is worth trying on this machine (see draft_can_pay);
        --draft-min or a fixed draft length (adaptive off) forces it."""
        if config.draft_min > 0 or not config.adaptive:
            return True
        return draft_can_pay(self.costs, config.draft_max)

    def _choose(self, spec: SpecState, room: int, expected: np.ndarray, draft_cost: float,
                probe: int | None = None, evidence: int | None = None) -> int:
        """The k that pays. A draft model's acceptance can only be learnt by drafting, so
        after a while without drafts it drafts once anyway (``probe``: the tokens it must
        first catch up; a probe after a long pause is a prefill costing several target
        steps, so only while that is short). N-gram proposals are judged as shadows.
        ``evidence``: the length of the match a copy follows (the bound on loss affords
        a failed long draft only to a long one, ledger.py)."""
        if room <= 0:
            return 0
        k_min = min(spec.config.draft_min, room)
        if not spec.config.adaptive:
            return self._batch.take(room)
        k = self._batch.choose(expected, k_min, draft_cost, spec.ledger, spec.config.draft_max, evidence)
        if k == 0 and probe is not None and probe <= TUNING.probe_catch_up_max and spec.probe.due():
            k = self._batch.bet(max(1, k_min), expected, draft_cost, spec.ledger, spec.config.draft_max)
        return k

    def unmeasured(self, capacity: int, draft_max: int) -> list[int]:
        """Calibration sizes the choice of k may need (up to the first that reaches
        ``draft_max``: an unmeasured size is costed as the next measured one, or
        extrapolated one past the largest) that were never timed here; costs remembered
        from an earlier run need no new measurement."""
        known = self.costs.snapshot()
        sizes = TUNING.calibration
        limit = min((b for b in sizes if b >= draft_max), default=sizes[-1])
        return [b for b in sizes if b <= min(limit, capacity) and b not in known]

    def calibrate(self, ctx: Any, batch: Any, seq: int, token: int, draft_max: int, capacity: int) -> None:
        """Time the batch sizes up to ``capacity`` rows (the batch's, and one sequence's
        context) that ``draft_max`` may need and are not yet known (engine thread)."""
        self.calibrated = True
        calibrate(self.costs, ctx, batch, seq, token, self.unmeasured(capacity, draft_max), self.draft)


def _picker(sampler: Sampler, p_min: float) -> Pick:
    """How the draft model picks a token: as the request would sample, keeping q."""
    need_top = p_min > 0.0

    def pick(logits, drafts: list[int]) -> tuple[int, Distribution, float]:
        q = sampler.distribution(logits, drafts)
        if sampler.params.greedy:
            return int(q.ids[0]), q, top_probability(logits) if need_top else 1.0
        return sampler.draw_free(q), q, float(q.probs.max())

    return pick


def choose_k(expected: np.ndarray, costs: Costs, *, k_min: int = 0, draft_cost: float = 0.0,
             rows: int = 1, others: float = 0.0, max_rows: int | None = None,
             allowed: np.ndarray | None = None) -> int:
    """The draft length with the most expected tokens per second; 0 if none beats plain
    decoding. ``expected[k]`` is the tokens a step yields with k drafts
    (k = 0 up to the longest allowed), ``draft_cost`` the time to draft one token (0 for
    n-gram lookup). In a shared batch, ``rows`` are those already in it (this slot's
    pending token included), ``others`` the tokens the other rows are expected to yield,
    and the batch may grow to ``max_rows``: k drafts are judged by the whole step's
    tokens per second, (others + E(k)) / T(rows + k). Alone (rows 1, others 0) that is
    E(k) / T(k + 1) against 1 / T(1). ``allowed[k]``: whether k may be drafted at all
    (the bound on loss, ledger.py)."""
    k_max = expected.size - 1
    if max_rows is not None:
        k_max = min(k_max, max_rows - rows)
    if allowed is not None:
        k_max = min(k_max, allowed.size - 1)
    k_lo = max(1, k_min)
    if k_max < k_lo:
        return 0
    ks = np.arange(k_lo, k_max + 1)
    t = costs.table(rows + k_max)  # t[b - 1] is T(b)
    rates = (others + expected[ks]) / (t[rows - 1 + ks] + ks * draft_cost)
    if allowed is not None:
        rates = np.where(allowed[ks], rates, -np.inf)
    best = int(np.argmax(rates))
    return int(ks[best]) if rates[best] > (others + 1.0) / t[rows - 1] else 0


class _Batch:
    """The target batch as the step's proposals fill it: the rows so far and the tokens
    they are expected to yield. With other requests in it, a draft must pay for the
    whole step (its rows slow every request in the batch) and may not make the step
    cost more than ``share_slack`` over the plain batch's."""

    def __init__(self, costs: Costs, generating: int, capacity: int) -> None:
        self.costs = costs
        self.rows = generating  # every generating slot's pending token
        self.tokens = float(generating)  # each yields one token at least
        self.max_rows: int | None = None
        if generating > 1:
            budget = costs.target(generating) * (1.0 + TUNING.share_slack)
            table = costs.table(max(generating, capacity))  # never decreasing with the size
            self.max_rows = int(np.searchsorted(table, budget, side="right"))  # the sizes within the budget

    def choose(self, expected: np.ndarray, k_min: int, draft_cost: float, ledger: Ledger, draft_max: int,
               evidence: int | None = None) -> int:
        """The k that pays for the step, among those the request's ledger allows."""
        extra, worth, longest = self._extra(expected.size - 1, draft_cost, draft_max)
        k = choose_k(expected, self.costs, k_min=k_min, draft_cost=draft_cost, rows=self.rows,
                     others=self.tokens - 1.0, max_rows=self.max_rows, allowed=ledger.allows(extra, longest, evidence))
        if k:
            ledger.place(extra, worth)
        return self.take(k, float(expected[k]) - 1.0) if k else 0

    def bet(self, k: int, expected: np.ndarray, draft_cost: float, ledger: Ledger, draft_max: int) -> int:
        """A draft of k whatever it is expected to yield (a probe), if the ledger allows it."""
        extra, worth, longest = self._extra(max(k, expected.size - 1), draft_cost, draft_max)
        if not ledger.allows(extra, longest)[k]:
            return 0
        ledger.place(extra, worth)
        return self.take(k)

    def _extra(self, k_max: int, draft_cost: float, draft_max: int) -> tuple[np.ndarray, float, float]:
        """What 0..k_max drafts on top of the rows so far add to the step, in plain steps
        (T(1)); what a kept token saves (the step of the batch without them); what the
        longest draft allowed, ``draft_max``, adds."""
        t = self.costs.table(self.rows + max(k_max, draft_max))
        ks = np.arange(k_max + 1)
        extra = (t[self.rows - 1 : self.rows + k_max] - t[self.rows - 1] + ks * draft_cost) / t[0]
        longest = (t[self.rows - 1 + draft_max] - t[self.rows - 1] + draft_max * draft_cost) / t[0]
        return extra, float(t[self.rows - 1] / t[0]), float(longest)

    def take(self, k: int, gain: float = 0.0) -> int:
        """k drafts go into the batch, expected to yield ``gain`` more tokens."""
        self.rows += k
        self.tokens += gain
        return k


def growth_limit(acceptance: Acceptance, k_max: int) -> int:
    """A draft model's depths never judged are only estimates: its drafts grow to at most
    twice the deepest position seen."""
    return min(k_max, max(TUNING.draft_growth_min, 2 * acceptance.deepest))


def draft_can_pay(costs: Costs, k_max: int) -> bool:
    """Could a draft model beat plain decoding here at all, even at a high acceptance?"""
    alpha = TUNING.draft_can_pay_alpha
    k = np.arange(1, k_max + 1)
    expected = (1.0 - alpha ** (k + 1)) / (1.0 - alpha)
    t = costs.table(k_max + 1)
    best = float(np.max(expected / (t[k] + k * costs.draft_token)))  # t[k] is T(k + 1)
    return best > TUNING.draft_can_pay_margin / t[0]
