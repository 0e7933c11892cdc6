"""The scheduler's speculation policy: which drafter each slot uses this step, how many
tokens it drafts (the k that pays, from measured costs), and the draft model's batch."""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import numpy as np

from localspec.engine import backend
from localspec.engine.draft import DraftJob, DraftModel, Pick
from localspec.engine.sampling import Distribution, one_hot, top_probability
from localspec.engine.speculate import (
    Acceptance,
    Costs,
    NgramIndex,
    RunAcceptance,
    SlotSpec,
    SpecConfig,
    choose_k,
    draft_can_pay,
    growth_limit,
)

PROBE_CATCH_UP_MAX = 32  # tokens the draft model may have to catch up for a probe
STEADY_CATCH_UP = 2  # tokens a draft phase catches up in steady state (last draft + the target's)
# A draft phase costs more than its decodes: catch-up of the target's new tokens and the
# decode whose token the confidence cut discards (measured here: about 1.3x).
DRAFT_OVERHEAD = 1.3
DRAFT_PRIOR = 0.9  # acceptance expected of a same-family draft model before evidence
# Batch sizes timed before the first draft. Costs are far from linear and not even
# monotonic between these (on a 2-core CPU here: 12 tokens cost more than 16, and 17
# up to 1.4 times 16), so the sizes that kernels favour are measured, not extrapolated.
CALIBRATION = (1, 2, 3, 4, 8, 16, 32, 64, 128)


class Plan(NamedTuple):
    kind: str  # "ngram<n>" or "draft"
    tokens: list[int]
    qs: list[Distribution]


class Speculator:
    def __init__(
        self, config: SpecConfig, draft: DraftModel | None, n_ctx: int, costs: Costs | None = None,
        batch_capacity: int = 512,
    ) -> None:
        self.config = config
        self.draft = draft
        self.n_ctx = n_ctx
        self.batch_capacity = batch_capacity  # the target batch holds every slot's drafts
        self.costs = costs or Costs()
        self.calibrated = costs is not None  # measured now or remembered: worth saving

    def start(self, prompt: list[int], mode: str) -> tuple[str, SlotSpec | None]:
        """A new request's effective mode and speculation state."""
        if mode == "auto" and self.draft is None:
            mode = "ngram"
        if mode == "off":
            return mode, None
        c = self.config
        return mode, SlotSpec(
            ngram=NgramIndex(prompt, c.ngram_min, c.ngram_max) if mode in ("ngram", "auto") else None,
            accept_ngram=RunAcceptance(),
            accept_draft=Acceptance(prior=DRAFT_PRIOR, k_max=c.draft_max),
        )

    def plan(self, slots: list[Any]) -> dict[int, Plan]:
        """Proposals per slot (by sequence id): n-gram lookups at once, the draft model's
        jobs in one batch per draft position."""
        plans: dict[int, Plan] = {}
        jobs: list[DraftJob] = []
        c = self.config
        share = self.batch_capacity // max(1, len(slots)) - 1  # each slot's pending token + drafts
        for slot in slots:
            if slot.spec is None:
                continue
            room = min(
                c.draft_max,
                share,
                self.n_ctx - 1 - len(slot.tokens),
                (slot.job.request.max_tokens or 1 << 30) - slot.generated - 1,
            )
            if room <= 0:
                continue
            if slot.spec.ngram is not None:
                order, proposal, start = slot.spec.ngram.propose(room)
                if proposal:
                    expected = slot.spec.accept_ngram.expected_tokens(slot.spec.kept_in_a_row, len(proposal), order)
                    k = self._choose(slot.spec, len(proposal), expected, 0.0)
                    if k:
                        plans[slot.seq] = Plan(f"ngram{order}", proposal[:k], [one_hot(t) for t in proposal[:k]])
                        slot.spec.ngram_start = start
                        slot.spec.shadow = None
                        continue
                    slot.spec.shadow_proposal(order, proposal, start)  # judged on the output instead
                if slot.mode == "ngram":
                    continue
            # auto: the draft model where the n-gram lookup has nothing that pays
            if self.draft is not None and slot.mode in ("draft", "auto") and self._draft_pays():
                gap = len(slot.tokens) + 1 - self.draft.cached(slot.seq, slot.tokens)
                expected = slot.spec.accept_draft.expected_tokens(growth_limit(slot.spec.accept_draft, room))
                k = self._choose(slot.spec, room, expected, self.costs.draft_token, probe=gap)
                if k:
                    jobs.append(DraftJob(slot.seq, slot.tokens + [slot.pending], k, self._picker(slot.sampler)))
        if jobs:
            t0 = time.perf_counter()
            caught_up = self.draft.draft(jobs, c.draft_p_min, self.costs.observe_draft)
            # A phase that first fed the draft a prompt is a one-off prefill, not what
            # drafting costs: counted, one would keep the draft model off for good.
            if caught_up <= STEADY_CATCH_UP * len(jobs):
                self.costs.observe_drafting(time.perf_counter() - t0, sum(len(j.drafts) for j in jobs))
            for job in jobs:
                plans[job.seq] = Plan("draft", job.drafts, job.qs)
        return plans

    def record(self, spec: SlotSpec, kind: str, drafted: int, accepted: int) -> None:
        """After verification: acceptance statistics and the n-gram copy cursor."""
        if kind.startswith("ngram"):
            spec.record("ngram", drafted, accepted, int(kind[5:]))
            spec.ngram.accepted(spec.ngram_start, accepted)
        else:
            spec.record(kind, drafted, accepted)

    def _draft_pays(self) -> bool:
        """Whether the draft model is worth trying on this machine (see draft_can_pay);
        --draft-min or a fixed draft length (adaptive off) forces it."""
        if self.config.draft_min > 0 or not self.config.adaptive:
            return True
        return draft_can_pay(self.costs, self.config.draft_max)

    def _choose(
        self, spec: SlotSpec, room: int, expected: np.ndarray, draft_cost: float, probe: int | None = None
    ) -> int:
        """The k that pays. A draft model's acceptance can only be learnt by drafting, so
        after a while without drafts it drafts once anyway (``probe``: the tokens it must
        first catch up; a probe after a long pause is a prefill costing several target
        steps, so only while that is short). N-gram proposals are judged as shadows."""
        if room <= 0:
            return 0
        k_min = min(self.config.draft_min, room)
        if not self.config.adaptive:
            return room
        k = choose_k(expected, self.costs, k_min=k_min, draft_cost=draft_cost)
        if k == 0 and probe is not None and probe <= PROBE_CATCH_UP_MAX and spec.should_probe():
            k = max(1, k_min)
        return k

    def _picker(self, sampler: Any) -> Pick:
        need_top = self.config.draft_p_min > 0.0

        def pick(logits, drafts: list[int]) -> tuple[int, Distribution, float]:
            q = sampler.distribution(logits, drafts)
            if sampler.params.greedy:
                return int(q.ids[0]), q, top_probability(logits) if need_top else 1.0
            return sampler.draw_free(q), q, float(q.probs.max())

        return pick

    def unmeasured(self, capacity: int) -> list[int]:
        """Calibration sizes the choice of k may need (up to the first that reaches
        --draft-max: an unmeasured size is costed as the next measured one, or extrapolated
        one past the largest) that were never timed here; costs remembered from an earlier
        run need no new measurement."""
        known = self.costs.snapshot()
        limit = min((b for b in CALIBRATION if b >= self.config.draft_max), default=CALIBRATION[-1])
        return [b for b in CALIBRATION if b <= min(limit, capacity) and b not in known]

    def calibrate(self, ctx: backend.Context, batch: backend.Batch, seq: int, token: int) -> None:
        """Time target decodes of the CALIBRATION sizes not yet known (and one draft step)
        once, on a free sequence, so that the first choice of draft length rests on this
        machine's numbers. Must run on the engine thread (llama.cpp's thread pool lives
        there; the first decode also warms it up)."""
        self.calibrated = True
        for b in [1, *self.unmeasured(batch.capacity)]:
            times = []
            for _ in range(3):
                batch.clear()
                for i in range(b):
                    batch.add(token, i, seq, True)
                t0 = time.perf_counter()
                ctx.decode(batch)
                times.append(time.perf_counter() - t0)
                ctx.seq_rm(seq, -1, -1)
            self.costs.set_target(b, sorted(times)[1])  # the median: the minimum flatters
        batch.clear()
        if self.draft is not None and not self.costs.draft_step:
            best = float("inf")
            for _ in range(3):
                job = DraftJob(seq, [token], 1, lambda logits, d: (token, one_hot(token), 1.0))
                t0 = time.perf_counter()
                self.draft.draft([job], 0.0, lambda s: None)
                best = min(best, time.perf_counter() - t0)
                self.draft.forget(seq)
            self.costs.draft_step = best * DRAFT_OVERHEAD
