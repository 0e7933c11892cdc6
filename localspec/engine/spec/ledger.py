"""What speculation has cost one request against plain decoding, and what it may still
risk: the bound on loss.

Every draft is a bet. On a CPU a failed draft of k tokens costs T(k + 1) - T(1), several
plain steps; a request whose bets keep failing (an answer that copies two lines of its
input and changes the third, over and over) can end well behind plain decoding however
good each bet looked. The ledger keeps the request's balance in plain steps, from the
measured costs: a draft adds its extra cost and each kept token pays back the step it
saved. A draft is placed only where, failing whole, it would leave the request within
its allowance (``TUNING.loss_share`` of the tokens written, and for a copy whose match
is past ``TUNING.loss_start`` tokens ``TUNING.loss_drafts`` failed drafts of the longest
length) behind plain, so by construction no request ends further behind than that; what drafts
won is credit that later bets may spend. Where the allowance is spent, drafts shrink to
what it still covers, or stop, while proposals go on being judged for free (shadows, the
copy's own judging), so a copy that resumes is drafted again as soon as one short draft
pays back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from localspec.engine.spec.tuning import TUNING


@dataclass
class Ledger:
    debt: float = 0.0  # plain steps behind plain decoding (negative: ahead)
    written: int = 0  # tokens the request has produced
    # the bet placed this step: the extra cost in steps of 0..k drafts, and a kept token's worth
    bet: tuple[np.ndarray, float] | None = None

    def allowance(self, longest: float, evidence: int | None = None) -> float:
        """How far behind plain the request may ever be, in plain steps: ``longest`` is
        what the longest draft allowed costs over a plain step, failing whole. That part
        is afforded only to a bet with evidence behind it: ``evidence`` is the length of
        the match a copy follows (for a draft model, None: the tokens written), and the
        failed draft opens from ``loss_start`` of it, in full ``loss_ramp`` later. A
        short quote is often where an answer parts from its source, or ends: most short
        answers end within 12-33 tokens, where one failed draft of 3 costs 5-9% on a CPU."""
        n = self.written if evidence is None else evidence
        ramp = min(1.0, max(0, n - TUNING.loss_start) / TUNING.loss_ramp)
        return TUNING.loss_drafts * longest * ramp + TUNING.loss_share * self.written

    def allows(self, extra: np.ndarray, longest: float, evidence: int | None = None) -> np.ndarray:
        """Which draft lengths 0..k the allowance covers: ``extra[k]`` is what k drafts
        add to the step, in plain steps."""
        return self.debt + extra <= self.allowance(longest, evidence)

    def place(self, extra: np.ndarray, worth: float) -> None:
        """A draft goes in (``worth``: the steps one kept token saves); settled once verified."""
        self.bet = (extra, worth)

    def settle(self, drafted: int, accepted: int) -> None:
        """A step's outcome: its bet's cost against the steps its kept tokens saved."""
        if self.bet is not None and drafted:
            extra, worth = self.bet
            self.debt += float(extra[min(drafted, extra.size - 1)]) - accepted * worth
        self.bet = None
        self.written += accepted + 1
