"""The draft model: a small model in its own context, one sequence per slot, that
proposes tokens for every drafting slot in one batch per draft position."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from localspec.engine import backend
from localspec.engine.sampling import Distribution, one_hot
from localspec.engine.slots import common_prefix
from localspec.errors import DraftMismatch

# (draft logits, drafts so far) -> (token, the distribution q it was drawn from, q's top probability)
Pick = Callable[[np.ndarray, list[int]], tuple[int, Distribution, float]]


@dataclass
class DraftJob:
    seq: int
    context: list[int]  # the target's tokens for this slot, ending with its pending token
    k: int
    pick: Pick
    p_min: float = 0.0  # stop when the draft's top probability falls below this
    drafts: list[int] = field(default_factory=list)
    qs: list[Distribution] = field(default_factory=list)
    done: bool = False


class DraftModel:
    def __init__(
        self,
        model: backend.Model,
        *,
        n_ctx: int,
        n_slots: int,
        n_batch: int,
        n_threads: int | None,
        kv_type: str,
    ) -> None:
        self.model = model
        self.ctx = backend.Context(
            model, n_ctx=n_ctx * n_slots, n_batch=n_batch, n_seq=n_slots,
            n_threads=n_threads, kv_type=kv_type,
        )
        self._batch = backend.Batch(n_batch)
        self._tokens: list[list[int]] = [[] for _ in range(n_slots)]  # what each seq's KV holds
        self.prompt_cache = None  # a promptcache.PromptCache of its own, set by the engine

    def draft(self, jobs: list[DraftJob], on_step: Callable[[float], None]) -> int:
        """Fill each job's drafts (up to its k; fewer when the draft's confidence drops
        below the job's ``p_min``). Catches each sequence up with its target context first, and
        returns how many tokens that took."""
        batch = self._batch
        batch.clear()
        waiting: list[tuple[DraftJob, int]] = []
        caught_up = 0
        for job in jobs:
            have = self._tokens[job.seq]
            keep = min(common_prefix(have, job.context), len(job.context) - 1)
            if keep < len(have):
                self.ctx.seq_rm(job.seq, keep, -1)
                del have[keep:]
            for i in range(keep, len(job.context)):
                if batch.n == batch.capacity:
                    self._flush(waiting)
                row = batch.add(job.context[i], i, job.seq, i == len(job.context) - 1)
            have.extend(job.context[keep:])
            caught_up += len(job.context) - keep
            waiting.append((job, row))
        self._flush(waiting)
        while True:
            live = [j for j in jobs if not j.done]
            if not live:
                return caught_up
            t0 = time.perf_counter()
            for job in live:
                pos = len(job.context) + len(job.drafts) - 1
                waiting.append((job, batch.add(job.drafts[-1], pos, job.seq, True)))
                self._tokens[job.seq].append(job.drafts[-1])
            self._flush(waiting)
            on_step(time.perf_counter() - t0)

    def _flush(self, waiting: list[tuple[DraftJob, int]]) -> None:
        """Decode the batch, then draw the next draft of every job whose row was in it."""
        if self._batch.n:
            self.ctx.decode(self._batch)
            self._batch.clear()
        for job, row in waiting:
            token, q, top = job.pick(self.ctx.logits(row), job.drafts)
            if top < job.p_min:
                job.done = True
                continue
            job.drafts.append(token)
            job.qs.append(q)
            job.done = len(job.drafts) >= job.k
        waiting.clear()

    def cached(self, seq: int, context: list[int]) -> int:
        """How many leading tokens of ``context`` the sequence's KV cache already holds."""
        return common_prefix(self._tokens[seq], context)

    def time_step(self, seq: int, token: int) -> float:
        """Seconds of one draft step (the best of three), on a free sequence."""
        best = float("inf")
        for _ in range(3):
            job = DraftJob(seq, [token], 1, lambda logits, d: (token, one_hot(token), 1.0))
            t0 = time.perf_counter()
            self.draft([job], lambda s: None)
            best = min(best, time.perf_counter() - t0)
            self.forget(seq)
        return best

    def restore(self, seq: int, tokens: list[int], state: bytearray) -> None:
        """Load a saved state of ``tokens`` (or more) into the sequence, where it holds fewer."""
        if len(tokens) <= self.cached(seq, tokens):
            return
        if self.ctx.state_seq_set(seq, state):
            self.ctx.seq_rm(seq, len(tokens), -1)
            self._tokens[seq][:] = tokens
        else:
            self._tokens[seq].clear()

    def share(self, src: int, dst: int, tokens: list[int]) -> None:
        """Give ``dst`` the prefix of ``tokens`` that ``src`` holds, where it is longer than its own."""
        n = self.cached(src, tokens)
        if n > self.cached(dst, tokens):
            self.forget(dst)
            self.ctx.seq_cp(src, dst, 0, n)
            self._tokens[dst][:] = tokens[:n]

    def keep_state(self, seq: int, tokens: list[int], owner: str, step: int | None = None) -> None:
        """Save the sequence's state, cut to what it shares with the target's ``tokens``
        (its rejected drafts go), when the prompt cache wants it."""
        cache, have = self.prompt_cache, self._tokens[seq]
        if cache is None:
            return
        n = common_prefix(have, tokens)
        if n < len(have):
            self.ctx.seq_rm(seq, n, -1)
            del have[n:]
        if cache.wants(have, owner) if step is None else cache.wants(have, owner, step):
            cache.save(list(have), self.ctx.state_seq_get(seq), owner)

    def forget(self, seq: int) -> None:
        self.ctx.seq_rm(seq, -1, -1)
        self._tokens[seq].clear()

    def close(self) -> None:
        self._batch.close()
        self.ctx.close()
        self.model.close()


def check_pair(target: backend.Model, draft: backend.Model) -> None:
    """Refuse a draft whose tokenizer differs from the target's: its token ids would mean
    other text. Compares type, size (llama.cpp tolerates up to 128 extra ids), BOS/EOS/EOT
    and every shared token's text."""
    t, d = target.vocab, draft.vocab
    names = f"the draft {draft.path.name} and the target {target.path.name}"
    problems = []
    if t.vocab_type != d.vocab_type:
        problems.append(f"tokenizer types differ ({d.vocab_type} vs {t.vocab_type})")
    if abs(t.n_vocab - d.n_vocab) > 128:
        problems.append(f"vocabulary sizes differ ({d.n_vocab} vs {t.n_vocab})")
    for label, a, b in (("BOS", d.bos, t.bos), ("EOS", d.eos, t.eos), ("EOT", d.eot, t.eot)):
        if a != b:
            problems.append(f"{label} ids differ ({a} vs {b})")
    if not problems:
        for tok in range(min(t.n_vocab, d.n_vocab)):
            if target.token_text(tok) != draft.token_text(tok):
                problems.append(f"token {tok} differs ({draft.token_text(tok)!r} vs {target.token_text(tok)!r})")
                break
    if problems:
        raise DraftMismatch(f"Cannot use {names} together: {problems[0]}.")

