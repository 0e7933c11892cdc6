"""One request's speculation: what it may draft from, the estimators that judge its
proposals, its ledger against plain decoding, its probes and its tally.

Every proposal, whichever drafter made it, is judged by one ``Estimator``
(acceptance.py) at one place (``Judged``): the n-gram index's by the run of output that
followed its proposals, a copy's by the length of the match behind it (in one of four
tables: see ``SpecState.judge_copy``), the draft model's by depth. The policy asks
``SpecState.judged`` which, and never needs to know the tables apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from localspec.engine.sampling import Distribution
from localspec.engine.spec.acceptance import Acceptance, Estimator, MatchAcceptance, RunAcceptance
from localspec.engine.spec.copy import CopyTracker
from localspec.engine.spec.ledger import Ledger
from localspec.engine.spec.ngram import NgramIndex
from localspec.engine.spec.store import Recall
from localspec.engine.spec.tuning import TUNING
from localspec.types import SpecConfig, SpecStats

Source = Literal["ngram", "match", "store", "draft"]


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


@dataclass(frozen=True)
class Judged:
    """Which estimator judges a proposal, and where: ``at`` is the run position (n-gram
    index), the match length (a copy) or 0 (the draft model); ``order`` the n-gram's length."""

    by: Estimator
    at: int
    order: int = 0
    per_token: bool = False  # judged token by token as the output comes (SpecState.emitted), not per draft

    def expected_tokens(self, k: int) -> np.ndarray:
        return self.by.expected_tokens(self.at, k, self.order)

    def update(self, drafted: int, accepted: int) -> None:
        if not self.per_token:
            self.by.update(self.at, drafted, accepted, self.order)


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
class Tally:
    """What speculation did for the request, counted as it goes (``Result.spec``)."""

    drafted: int = 0
    accepted: int = 0
    steps: int = 0
    lengths: dict[int, int] = field(default_factory=dict)  # draft length -> steps
    by_drafter: dict[str, tuple[int, int]] = field(default_factory=dict)  # kind -> (drafted, accepted)
    accepted_at: dict[int, int] = field(default_factory=dict)  # draft position -> times kept
    shadowed: int = 0  # proposals judged without drafting
    draft_s: float = 0.0
    verify_s: float = 0.0
    sample_s: float = 0.0

    def count(self, kind: str | None, drafted: int, accepted: int) -> None:
        self.steps += 1
        self.lengths[drafted] = self.lengths.get(drafted, 0) + 1
        if kind is None or not drafted:
            return
        self.drafted += drafted
        self.accepted += accepted
        d, a = self.by_drafter.get(kind, (0, 0))
        self.by_drafter[kind] = (d + drafted, a + accepted)
        for position in range(1, accepted + 1):
            self.accepted_at[position] = self.accepted_at.get(position, 0) + 1

    @property
    def ran(self) -> str:
        """What actually drafted: off, ngram, draft, or ngram+draft."""
        kinds = [k for k in ("ngram", "draft") if self.by_drafter.get(k, (0, 0))[0]]
        return "+".join(kinds) if kinds else "off"

    def stats(self) -> SpecStats:
        return SpecStats(self.ran, self.drafted, self.accepted, self.steps, dict(sorted(self.lengths.items())),
                         self.draft_s, self.verify_s, self.sample_s, dict(self.by_drafter),
                         dict(sorted(self.accepted_at.items())))


@dataclass
class Probe:
    """A draft model's acceptance can only be learnt by drafting: after a while without
    drafts, draft once anyway, so that the estimate can notice that the text changed;
    each probe that changes nothing doubles the wait."""

    idle_steps: int = 0  # steps since the last draft
    every: int = TUNING.probe_every
    probing: bool = False

    def due(self) -> bool:
        self.probing = self.idle_steps >= self.every
        return self.probing

    def stepped(self, drafted: bool) -> None:
        if not drafted:
            self.idle_steps += 1
            return
        if self.probing:  # a probe that did not restart drafting: wait twice as long
            self.every = min(self.every * 2, TUNING.probe_every_max)
            self.probing = False
        else:
            self.every = TUNING.probe_every
        self.idle_steps = 0


@dataclass
class SpecState:
    """One request's speculation: its settings, what it drafts from, the estimators that
    judge its proposals, its ledger, probes and tally."""

    config: SpecConfig
    drafters: str  # ngram, draft or auto: what this request may use here
    ngram: NgramIndex | None
    accept_draft: Acceptance = field(default_factory=lambda: Acceptance(prior=TUNING.draft_prior, k_max=64))
    # The n-gram index's proposals, by place in the run of output that followed them.
    accept_ngram: RunAcceptance = field(default_factory=RunAcceptance)
    kept_in_a_row: int = 0  # the run: output tokens in a row that followed n-gram proposals
    shadow: Shadow | None = None
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
    probe: Probe = field(default_factory=Probe)
    tally: Tally = field(default_factory=Tally)

    def judged(self, source: Source, order: int = 0, start: int = -1) -> Judged:
        """The estimator that judges a proposal from ``source`` now, and where."""
        if source == "draft":
            return Judged(self.accept_draft, 0)
        if source == "store":
            return Judged(self.accept_stored(), order)
        if source == "match":  # every token is judged as it comes (emitted)
            return Judged(self.judge_copy(start), order, per_token=True)
        return Judged(self.accept_ngram, self.run_depth(), order)

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

    def judge_copy(self, start: int) -> MatchAcceptance:
        """The table a copy of the text from ``start`` is judged in: quoting the prompt
        (while the answer copies, or not) or the answer's own text."""
        copy = self.copy
        if copy is None or start >= copy.prompt:
            return self.accept_own
        return self.accept_fresh if self.writing() else self.accept_quote

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
        c = agreeing(stored, own)
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
            self.tally.shadowed += 1

    def emitted(self, token: int) -> None:
        """A token of the output: indexed for lookup, and judged against the shadow as it
        comes (evidence at once, not after a whole proposal's worth of steps)."""
        if self.ngram is not None:
            self.ngram.extend([token])
        if self.copy is not None:
            quotes = self.judge_copy(0)  # as it was when the token was proposed
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
        """After verification: the ledger, the tally, the estimator that judged the
        proposal, the run and the n-gram copy cursor."""
        drafted = len(proposal.tokens) if proposal else 0
        self.ledger.settle(drafted, accepted)
        self.tally.count(proposal.kind if proposal else None, drafted, accepted)
        self.probe.stepped(drafted > 0)
        if proposal is None or drafted == 0:
            return
        if proposal.kind == "draft":
            self.judged("draft").update(drafted, accepted)
            return
        self.judged(proposal.source, proposal.order, proposal.start).update(drafted, accepted)
        self.kept_in_a_row = self.kept_in_a_row + accepted if accepted == drafted else 0
        if self.ngram is not None:
            start = self.copy.own_position(proposal.start) if proposal.source == "match" and self.copy else proposal.start
            self.ngram.accepted(start, accepted)

    def stats(self) -> SpecStats:
        """What speculation did for the request, as its Result reports it."""
        return self.tally.stats()


def agreeing(tokens: list[int], other: list[int]) -> int:
    """How far ``tokens`` may go without contradicting ``other``: all of it where one is
    a prefix of the other, else up to their first difference."""
    for i, (a, b) in enumerate(zip(tokens, other)):
        if a != b:
            return i
    return len(tokens)
