"""The speculation policy: for each slot and step, which drafter proposes and how many
tokens it drafts (the k that pays, from measured costs and the request's acceptance so
far), including none when nothing beats plain decoding; probes; the draft model's batch.

It reads an explicit per-slot view (``SlotView``) built by the scheduler, never the
scheduler's own slot, and returns typed proposals.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from localspec.engine.sampling import Distribution, Sampler, one_hot, top_probability
from localspec.engine.spec.acceptance import Acceptance, MatchAcceptance, RunAcceptance
from localspec.engine.spec.copy import CopyTracker
from localspec.engine.spec.costs import Costs, calibrate
from localspec.engine.spec.draftmodel import DraftJob, DraftModel, Pick
from localspec.engine.spec.ledger import Ledger
from localspec.engine.spec.ngram import NgramIndex
from localspec.engine.spec.patch import Tokenizer, diff_hints
from localspec.engine.spec.store import Recall, Store
from localspec.engine.spec.suffix import SuffixIndex
from localspec.engine.spec.tuning import TUNING
from localspec.types import SpecConfig, SpecStats


@dataclass(frozen=True)
class Proposal:
    """Tokens a drafter proposes for one slot, each with the distribution q it was drawn
    from (one-hot for an n-gram copy or a greedy draft)."""

    kind: Literal["ngram", "draft"]
    tokens: list[int]
    qs: list[Distribution]
    order: int = 0  # n-gram: the length of the match
    start: int = -1  # n-gram: where in the request's text the tokens were copied from
    # n-gram: which index proposed: "ngram" (the short n-gram index), "match" (the
    # longest earlier match in the request's own text), "store" (earlier requests' texts)
    source: Literal["ngram", "match", "store"] = "ngram"


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
class SpecState:
    """One request's speculation: its settings, n-gram index, acceptance, and stats."""

    config: SpecConfig
    drafters: str  # ngram, draft or auto: what this request may use here
    ngram: NgramIndex | None
    accept_ngram: RunAcceptance  # by place in the run of output that followed the proposals
    accept_draft: Acceptance
    kept_in_a_row: int = 0  # the run: output tokens in a row that followed n-gram proposals
    drafted: int = 0
    accepted: int = 0
    steps: int = 0
    ngram_drafted: int = 0
    model_drafted: int = 0
    lengths: dict[int, int] = field(default_factory=dict)
    by_drafter: dict[str, tuple[int, int]] = field(default_factory=dict)  # kind -> (drafted, accepted)
    accepted_at: dict[int, int] = field(default_factory=dict)  # draft position -> times kept
    idle_steps: int = 0  # steps since the last draft, for probing
    probe_every: int = TUNING.probe_every
    probing: bool = False
    draft_s: float = 0.0
    verify_s: float = 0.0
    sample_s: float = 0.0
    shadow: Shadow | None = None
    shadowed: int = 0  # proposals judged without drafting
    recall: Recall | None = None  # the text's end matched against earlier requests' texts
    copy: CopyTracker | None = None  # the copy of its own earlier text it follows, edits learnt
    # Every output token is judged by the copy it followed, in one of three tables: a copy
    # of the output's own earlier text (a restated signature: on the 25 recorded answers
    # such copies held 42% at matches of 8-15 tokens, quotes of the prompt 97%); a quote of
    # the prompt (or of an earlier request's text, from the store) made while the answer
    # has been copying (an edit writing its input out again), trusted at the measured
    # priors; and one made right after the answer's own writing (a phrase quoted in a
    # summary), often a coincidence: on the 25 answers quotes at matches of 8-15
    # tokens held 98-99% where at most 8 of the last 32 tokens were the answer's own,
    # 92-94% where 9 or more were.
    accept_store: MatchAcceptance = field(default_factory=lambda: MatchAcceptance(scale_prior=TUNING.quote_scale_prior))
    accept_quote: MatchAcceptance = field(default_factory=lambda: MatchAcceptance(scale_prior=TUNING.quote_scale_prior))
    accept_fresh: MatchAcceptance = field(default_factory=lambda: MatchAcceptance(scale_prior=TUNING.fresh_scale_prior))
    accept_own: MatchAcceptance = field(default_factory=MatchAcceptance)
    written: int = 0  # output tokens so far
    # Where the store and the request's own copy propose different tokens: which one the
    # output followed at their last difference (see stored_part), and the difference
    # still to come (output tokens when it is decided, the store's token, the copy's).
    followed: Literal["store", "own"] | None = None
    race: tuple[int, int, int] | None = None
    ledger: Ledger = field(default_factory=Ledger)  # its balance against plain: the bound on loss

    def run_depth(self) -> int:
        """The run position the short n-gram index's proposals are costed and judged at:
        no deeper than the longest match behind the text's end (the suffix index's, or the
        copy's through its edits). Output that followed one short match after another is
        a chain of coincidences, not a copy: on the replay of the 25 answers (EPYC costs),
        drafts of 1-3-token matches made 8 or more tokens into a run yielded 0.15-0.63 of
        what the run's rates promised."""
        copy = self.copy
        if copy is None:
            return self.kept_in_a_row
        n = copy.index.match()[0]
        if copy.copy is not None:
            n = max(n, copy.copy.length)
        return min(self.kept_in_a_row, n)

    def writing(self) -> bool:
        """Whether the answer has just been writing text of its own (see accept_quote)."""
        return self.copy is not None and self.copy.originals() >= TUNING.fresh_originals

    def accept_copy(self, start: int) -> MatchAcceptance:
        """The acceptance of a copy of the text from ``start``: quoting the prompt (while
        the answer copies, or not) or the answer's own text."""
        copy = self.copy
        if copy is None or start >= copy.prompt:
            return self.accept_own
        return self.accept_fresh if self.writing() else self.accept_quote

    def quote_table(self) -> MatchAcceptance:
        """The table a quote of the prompt made now is judged in."""
        return self.accept_copy(0)

    def accept_stored(self) -> MatchAcceptance:
        """The acceptance of a copy of an earlier request's text: as a quote of the prompt."""
        return self.accept_fresh if self.writing() else self.accept_store

    def stored_part(self, stored: list[int], own: list[int], longer: bool) -> list[int]:
        """Of a stored text's proposal, what to draft where the request's own copy
        proposes too. An earlier answer's match runs past the copy's (its chat template
        matches too) but knows neither the edits the copy learnt nor this request's
        task: where the two agree, the longer proposal goes; where they differ, the side
        the output followed at their last difference, and before any, the store where
        its match is ``longer`` (or as long: an earlier answer the output has followed
        from its start says more than the input both copy; on the agent trace's replay
        ties to the own copy cost 2.5%)."""
        c = _agreeing(stored, own)
        if c == len(stored):  # one goes on where the other stops
            return stored if len(stored) > len(own) else []
        if self.race is None:
            self.race = (self.written + c + 1, stored[c], own[c])
        side = self.followed or ("store" if longer else "own")
        return stored if side == "store" else []

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
        if self.copy is not None:
            quotes = self.quote_table()  # as it was when the token was proposed
            judged = self.copy.emitted(token)
            if judged is not None:
                n, kept, quoted = judged
                (quotes if quoted else self.accept_own).judge(n, kept)
        if self.recall is not None:
            self.recall.extend([token])
        self.written += 1
        if self.race is not None and self.written == self.race[0]:
            _, stored, own = self.race
            self.followed = "store" if token == stored else "own" if token == own else self.followed
            self.race = None
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

    def record(self, proposal: Proposal | None, accepted: int) -> None:
        """After verification: acceptance statistics, the run, the n-gram copy cursor."""
        drafted = len(proposal.tokens) if proposal else 0
        self.ledger.settle(drafted, accepted)
        self.steps += 1
        self.lengths[drafted] = self.lengths.get(drafted, 0) + 1
        if proposal is None or drafted == 0:
            self.idle_steps += 1
            return
        self.drafted += drafted
        self.accepted += accepted
        d, a = self.by_drafter.get(proposal.kind, (0, 0))
        self.by_drafter[proposal.kind] = (d + drafted, a + accepted)
        for position in range(1, accepted + 1):
            self.accepted_at[position] = self.accepted_at.get(position, 0) + 1
        if proposal.kind == "ngram":
            self.ngram_drafted += drafted
            if proposal.source == "store":
                self.accept_stored().update(proposal.order, drafted, accepted)
            elif proposal.source == "ngram":
                self.accept_ngram.update(self.run_depth(), drafted, accepted, proposal.order)
            # ("match": every token was judged as it came, in emitted)
            self.kept_in_a_row = self.kept_in_a_row + accepted if accepted == drafted else 0
            if self.ngram is not None:
                start = self.copy.own_position(proposal.start) if proposal.source == "match" and self.copy else proposal.start
                self.ngram.accepted(start, accepted)
        else:
            self.model_drafted += drafted
            self.accept_draft.update(drafted, accepted)
        if self.probing:  # a probe that did not restart drafting: wait twice as long
            self.probe_every = min(self.probe_every * 2, TUNING.probe_every_max)
            self.probing = False
        else:
            self.probe_every = TUNING.probe_every
        self.idle_steps = 0

    @property
    def ran(self) -> str:
        """What actually drafted: off, ngram, draft, or ngram+draft."""
        kinds = [n for n, c in (("ngram", self.ngram_drafted), ("draft", self.model_drafted)) if c]
        return "+".join(kinds) if kinds else "off"

    def stats(self) -> SpecStats:
        """What speculation did for the request, as its Result reports it."""
        return SpecStats(self.ran, self.drafted, self.accepted, self.steps, dict(sorted(self.lengths.items())),
                         self.draft_s, self.verify_s, self.sample_s, dict(self.by_drafter),
                         dict(sorted(self.accepted_at.items())))

    def should_probe(self) -> bool:
        """Draft once anyway after a while without drafts, so that the acceptance estimate
        can notice that the text changed; each probe that changes nothing doubles the wait."""
        self.probing = self.idle_steps >= self.probe_every
        return self.probing


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
            accept_ngram=RunAcceptance(),
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
                    expected = (spec.accept_stored().expected_tokens(order, len(tokens)) if source == "store" else
                                spec.accept_copy(start).expected_tokens(order, len(tokens)) if source == "match" else
                                spec.accept_ngram.expected_tokens(spec.run_depth(), len(tokens), order))
                    k = self._choose(spec, len(tokens), expected, 0.0)
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
                expected = spec.accept_draft.expected_tokens(growth_limit(spec.accept_draft, room))
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
            tokens = tokens[: _agreeing(tokens, own_tokens)]
        yield order, tokens, start, "ngram"

    def _draft_pays(self, config: SpecConfig) -> bool:
        """Whether the draft model is worth trying on this machine (see draft_can_pay);
        --draft-min or a fixed draft length (adaptive off) forces it."""
        if config.draft_min > 0 or not config.adaptive:
            return True
        return draft_can_pay(self.costs, config.draft_max)

    def _choose(self, spec: SpecState, room: int, expected: np.ndarray, draft_cost: float,
                probe: int | None = None) -> int:
        """The k that pays. A draft model's acceptance can only be learnt by drafting, so
        after a while without drafts it drafts once anyway (``probe``: the tokens it must
        first catch up; a probe after a long pause is a prefill costing several target
        steps, so only while that is short). N-gram proposals are judged as shadows."""
        if room <= 0:
            return 0
        k_min = min(spec.config.draft_min, room)
        if not spec.config.adaptive:
            return self._batch.take(room)
        k = self._batch.choose(expected, k_min, draft_cost, spec.ledger, spec.config.draft_max)
        if k == 0 and probe is not None and probe <= TUNING.probe_catch_up_max and spec.should_probe():
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


def _agreeing(tokens: list[int], other: list[int]) -> int:
    """How far ``tokens`` may go without contradicting ``other``: all of it where one is
    a prefix of the other, else up to their first difference."""
    for i, (a, b) in enumerate(zip(tokens, other)):
        if a != b:
            return i
    return len(tokens)


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

    def choose(self, expected: np.ndarray, k_min: int, draft_cost: float, ledger: Ledger, draft_max: int) -> int:
        """The k that pays for the step, among those the request's ledger allows."""
        extra, worth, longest = self._extra(expected.size - 1, draft_cost, draft_max)
        k = choose_k(expected, self.costs, k_min=k_min, draft_cost=draft_cost, rows=self.rows,
                     others=self.tokens - 1.0, max_rows=self.max_rows, allowed=ledger.allows(extra, longest))
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
