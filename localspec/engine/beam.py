"""Beam search: N hypotheses sharing their common prefix in the KV cache.

Each hypothesis lives on a sequence of its own (one KV slot). At each step every live
hypothesis decodes its last token in one batch; the best N continuations over all of
them (by summed log-probability) are kept. A continuation that branches off a parent
another one also keeps gets a copy of the parent's KV entries (``seq_cp``: in a split
cache, llama-server's layout and the engine's, a copy of the parent's stream); a parent
that nobody keeps frees its sequence.
A hypothesis that ends (end of generation) is set aside with its score, logprob /
length^alpha. The search stops when N have ended and no live one can still rank among
them (at once with ``early_stopping``), or at max_tokens. Deterministic: no sampling.
Log-probabilities are the model's after the request's logit bias (a ban is a ban), with
no temperature or truncation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from localspec.engine.sampling import LogitsProcessor, make_logits_processors
from localspec.types import BeamHypothesis, FinishReason, Request, Result, Timings, Usage


@dataclass(frozen=True)
class Hypothesis:
    tokens: tuple[int, ...]
    logprob: float  # summed over tokens
    ended: bool = False  # by an end-of-generation token (kept in tokens)

    def score(self, alpha: float) -> float:
        return self.logprob / max(1, len(self.tokens)) ** alpha


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    m = x.max()
    return x - (m + math.log(np.exp(x - m).sum()))


def select(live: list[Hypothesis], logprobs: list[np.ndarray], width: int,
           is_end: Callable[[int], bool]) -> tuple[list[tuple[int, Hypothesis]], list[Hypothesis]]:
    """The next live hypotheses as (parent index, hypothesis), best first, and those that
    ended at this step. Candidates are ranked over all parents; an ending one counts
    against the width only where it ranks among the best ``width`` (as in Transformers)."""
    cands: list[tuple[float, int, int]] = []
    for i, (hyp, lp) in enumerate(zip(live, logprobs)):
        k = min(2 * width, lp.size)
        top = np.argpartition(-lp, k - 1)[:k]
        cands.extend((hyp.logprob + float(lp[t]), i, int(t)) for t in top if np.isfinite(lp[t]))
    cands.sort(key=lambda c: (-c[0], c[1], c[2]))  # ties: earlier parent, lower token id
    nxt: list[tuple[int, Hypothesis]] = []
    ended: list[Hypothesis] = []
    for rank, (total, i, token) in enumerate(cands):
        hyp = Hypothesis(live[i].tokens + (token,), total, ended=is_end(token))
        if hyp.ended:
            if rank < width:
                ended.append(hyp)
            continue
        nxt.append((i, hyp))
        if len(nxt) == width:
            break
    return nxt, ended


def done(finished: list[Hypothesis], live: list[Hypothesis], width: int, alpha: float, early: bool) -> bool:
    """Whether no live hypothesis can still enter the best ``width`` ended ones."""
    if len(finished) < width:
        return False
    if early or not live:
        return True
    worst = sorted((h.score(alpha) for h in finished), reverse=True)[width - 1]
    return max(h.score(alpha) for h in live) < worst


def assign(parents: list[int], seqs: list[int], n_live: int) -> tuple[list[int], list[tuple[int, int]]]:
    """Sequences for the next hypotheses, whose parents (indexes into the current live
    ones, which sit on ``seqs[:n_live]``) are ``parents``: the first child of a parent
    stays on its sequence; the others take sequences no kept parent holds and get the
    parent's entries copied. Returns (each child's sequence, the (src, dst) copies)."""
    kept = set(parents)
    spare = [s for i, s in enumerate(seqs[:n_live]) if i not in kept] + list(seqs[n_live:])
    taken: set[int] = set()
    out, copies = [], []
    for p in parents:
        if p not in taken:
            taken.add(p)
            out.append(seqs[p])
        else:
            dst = spare.pop(0)
            copies.append((seqs[p], dst))
            out.append(dst)
    return out, copies


def processed(logits: np.ndarray, processors: list[LogitsProcessor], tokens: list[int]) -> np.ndarray:
    for process in processors:
        logits = process(tokens, logits)
    return logits


@dataclass(frozen=True)
class Outcome:
    hypotheses: list[Hypothesis]  # best first
    stopped: str  # "stop" (the best ones ended), "length" or "cancelled"
    prompt_s: float
    decode_s: float
    steps: int


def search(ctx, batch, seqs: list[int], prompt: list[int], *, width: int, alpha: float, early: bool,
           max_tokens: int, n_ctx: int, processors: list[LogitsProcessor], is_end: Callable[[int], bool],
           cancelled: Callable[[], bool]) -> Outcome:
    """Run the search on ``seqs`` (``width`` free KV sequences, left empty after)."""
    import time

    t0 = time.perf_counter()
    for seq in seqs:
        ctx.seq_rm(seq, -1, -1)
    try:
        logits = [_prefill(ctx, batch, seqs[0], prompt)]
        t1 = time.perf_counter()
        live, order, finished, steps = [Hypothesis((), 0.0)], list(seqs), [], 0
        stopped = "length"
        while True:
            lps = [log_softmax(processed(lg, processors, list(h.tokens))) for h, lg in zip(live, logits)]
            nxt, ended = select(live, lps, width, is_end)
            finished += ended
            new = [h for _, h in nxt]
            length = len(live[0].tokens) + 1
            if cancelled() or not new or done(finished, new, width, alpha, early):
                stopped = "cancelled" if cancelled() else "stop"
                live = new
                break
            if length >= max_tokens or len(prompt) + length >= n_ctx:
                live = new
                break
            seq_of, copies = assign([p for p, _ in nxt], order, len(live))
            for src, dst in copies:
                ctx.seq_rm(dst, -1, -1)
                ctx.seq_cp(src, dst, -1, -1)
            order = seq_of + [s for s in order if s not in seq_of]
            logits = _step(ctx, batch, [(h.tokens[-1], len(prompt) + length - 1, s) for h, s in zip(new, seq_of)])
            live, steps = new, steps + 1
        if stopped != "stop" or len(finished) < width:
            finished += live
        best = sorted(finished, key=lambda h: -h.score(alpha))[:width]
        return Outcome(best, stopped, t1 - t0, time.perf_counter() - t1, steps)
    finally:
        for seq in seqs:
            ctx.seq_rm(seq, -1, -1)


_REASONS = {"stop": FinishReason.EOS, "length": FinishReason.LENGTH, "cancelled": FinishReason.CANCELLED}


def answer(ctx, batch, model, seqs: list[int], prompt: list[int], request: Request, *, n_ctx: int,
           template: str | None, cancelled: Callable[[], bool]) -> Result:
    """A beam-search request's Result: the best hypothesis as its text, all of them in
    ``beams``."""
    alpha = float(request.length_penalty)
    out = search(ctx, batch, seqs, prompt, width=request.beams or 1, alpha=alpha, early=request.early_stopping,
                 max_tokens=request.max_tokens or n_ctx, n_ctx=n_ctx,
                 processors=make_logits_processors(request.sampling), is_end=model.is_eog, cancelled=cancelled)

    def text(tokens: tuple[int, ...]) -> str:
        return b"".join(model.token_to_piece(t) for t in tokens if not model.is_eog(t)).decode("utf-8", "replace")

    hyps = tuple(BeamHypothesis(text(h.tokens), h.score(alpha), h.logprob, h.tokens,
                                FinishReason.EOS if h.ended else _REASONS[out.stopped]) for h in out.hypotheses)
    best = hyps[0]
    return Result(best.text, best.finish_reason, Usage(len(prompt), len(best.token_ids)),
                  Timings(out.prompt_s, out.decode_s, out.steps), template, beams=hyps)


def _prefill(ctx, batch, seq: int, prompt: list[int]) -> np.ndarray:
    """Decode the prompt on ``seq`` in chunks; the logits after its last token."""
    for start in range(0, len(prompt), batch.capacity):
        batch.clear()
        chunk = prompt[start : start + batch.capacity]
        for i, token in enumerate(chunk):
            batch.add(token, start + i, seq, start + i == len(prompt) - 1)
        ctx.decode(batch)
    return np.array(ctx.logits(batch.n - 1), copy=True)


def _step(ctx, batch, rows: list[tuple[int, int, int]]) -> list[np.ndarray]:
    """Decode (token, position, sequence) rows, in chunks; the logits of each row."""
    out = []
    for start in range(0, len(rows), batch.capacity):
        batch.clear()
        for token, pos, seq in rows[start : start + batch.capacity]:
            batch.add(token, pos, seq, True)
        ctx.decode(batch)
        out.extend(np.array(ctx.logits(i), copy=True) for i in range(batch.n))
    return out
