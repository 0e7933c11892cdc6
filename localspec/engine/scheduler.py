"""The engine: one thread owns the llama.cpp context and runs every request in it.

Each request gets a slot, which is a sequence id in the context. One engine step puts the
pending token of every generating slot, plus prompt chunks of the slots still prefilling,
into one batch (continuous batching), decodes it once, then samples for each slot that
asked for logits. Front ends talk to it only through ``Engine.submit(Request) -> Stream``.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import replace
from pathlib import Path

from localspec.engine import backend, beam, embed, intake, promptcache
from localspec.engine.config import DEFAULT_CTX, EngineConfig, SlotState
from localspec.engine.constraint import Constraints
from localspec.engine.reuse import Keep, Reuse, open_cache
from localspec.engine.sampling import Distribution, Sampler, logprob, top2_margin, top_logprobs
from localspec.engine.slots import Job, Slot, common_prefix
from localspec.engine.spec import costs as costs_cache
from localspec.engine.spec.draftmodel import DraftModel, check_pair
from localspec.engine.spec.policy import SlotView, SpecPolicy
from localspec.engine.spec.state import Proposal
from localspec.engine.spec.store import Store
from localspec.engine.spec.tuning import TUNING
from localspec.engine.spec.verify import verify
from localspec.engine.stream import Stream
from localspec.engine.text import TextAssembler
from localspec.errors import EngineClosed, InvalidRequest, LocalspecError
from localspec.types import Constraint, FinishReason, Request, Result, SpecStats, Timings, TokenEvent, Usage


class Engine:
    """Loads a model, owns its context on a thread of its own, runs submitted requests
    (slots.py: a request's job and slot; reuse.py: starting one from state computed before)."""

    def __init__(self, model_path: str | Path, config: EngineConfig | None = None) -> None:
        self.config = config = config or EngineConfig()
        t0 = time.perf_counter()
        self.model = backend.Model(model_path, n_gpu_layers=config.n_gpu_layers)
        train = self.model.n_ctx_train or DEFAULT_CTX
        self.n_ctx = config.n_ctx or min(train, DEFAULT_CTX)
        self.ctx = backend.Context(
            self.model,
            n_ctx=self.n_ctx * config.n_slots,
            n_batch=config.n_batch,
            n_seq=config.n_slots,
            n_threads=config.n_threads,
            kv_type=config.kv_type,
        )
        self.spec = config.spec
        self.draft: DraftModel | None = None
        if config.draft_model is not None:
            draft_model = backend.Model(config.draft_model, n_gpu_layers=config.draft_gpu_layers)
            try:
                check_pair(self.model, draft_model)
            except LocalspecError:
                draft_model.close()
                raise
            self.draft = DraftModel(
                draft_model, n_ctx=self.n_ctx, n_slots=config.n_slots, n_batch=config.n_batch,
                n_threads=config.n_threads, kv_type=config.kv_type,
            )
        elif self.spec.mode == "draft":
            raise InvalidRequest("Speculation mode 'draft' needs a draft model (--draft MODEL).")
        self.prompt_cache: promptcache.PromptCache | None = None
        if config.prompt_cache_dir is not None:
            self.prompt_cache = open_cache(config, self.ctx)
            if self.draft is not None:
                self.draft.prompt_cache = open_cache(config, self.draft.ctx)
        self.load_s = time.perf_counter() - t0
        self.constraints = Constraints(self.model)
        self.plan = None  # the memory plan and the settings, when opened by open_engine
        self.settings = None
        self._batch = backend.Batch(config.n_batch)
        self._costs_key = costs_cache.cache_key(model_path, config.draft_model, config.n_threads, config.kv_type)
        self.policy = SpecPolicy(self.draft, costs_cache.load_cached(self._costs_key), self._batch.capacity)
        self.policy.tokenizer = self.model  # to read the diffs in prompts (spec/patch.py)
        self._slots = [Slot(seq=i) for i in range(config.n_slots)]
        self._reuse = Reuse(self.ctx, self._slots, self.draft, self.prompt_cache, config.n_batch)
        self.steps = 0  # engine steps (decodes) so far
        self.prefilled = 0  # prompt tokens decoded so far (cached and copied prompts are not)
        # each item: the jobs of one submit (n choices of one prompt), None to stop, or a wake-up
        self._inbox: queue.SimpleQueue[list[Job] | object | None] = queue.SimpleQueue()
        self._gate = threading.Condition()  # close() waits for submits under way
        self._submitting = 0
        self._waiting: list[list[Job]] = []
        self._closed = False
        self._embedder: embed.Embedder | None = None
        #: made for embeddings (its GGUF declares a pooling type), not for generating text
        self.is_embedding_model = embed.is_embedding_model(self.model)
        self._thread = threading.Thread(target=self._run, name="localspec-engine", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ front-end API

    def prepare(self, request: Request) -> tuple[list[int], str | None]:
        """Validate the request and tokenize its prompt, in the caller's thread (bad input fails at once)."""
        return self._prepare(request)[1:]

    def _prepare(self, request: Request) -> tuple[Request, list[int], str | None]:
        """``prepare``, and the request with the constraint it runs under (its tools' grammar)."""
        if self.is_embedding_model:
            raise InvalidRequest(f"{self.model.path.name} is an embedding model: it gives embeddings "
                                 "(localspec embed, /v1/embeddings), not text.")
        intake.check(request, self.model.n_vocab)
        constraint = self.constraint_for(request)
        if constraint is not None:
            self.constraints.grammar(constraint)  # a bad one fails here, in one sentence
        tokens, template = intake.prompt_tokens(self.model, request, self.n_ctx)
        return (replace(request, constraint=constraint) if request.tools else request), tokens, template

    def constraint_for(self, request: Request) -> Constraint | None:
        """The request's constraint, or the grammar of its tool calls."""
        return intake.constraint(request, self.tool_family, self.constraints.literal)

    @property
    def tool_family(self) -> str:
        """How this model writes tool calls (generic when its template knows no tools)."""
        return intake.tool_family(self.model.chat_template)

    def submit(self, request: Request) -> Stream:
        return self.submit_n(request, 1)[0]

    def submit_n(self, request: Request, n: int) -> list[Stream]:
        """``n`` choices for one prompt, decoded together on ``n`` slots: the prompt is prefilled
        once and its KV cache copied to the others (``llama_memory_seq_cp``); choice i samples with seed + i."""
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= len(self._slots):
            raise InvalidRequest(f"n must be from 1 to the number of slots ({len(self._slots)}), not {n!r}.")
        if isinstance(request.beams, int) and (n != 1 or request.beams > len(self._slots)):
            raise InvalidRequest(f"beams must be at most the number of slots ({len(self._slots)}), n 1, not {request.beams}.")
        with self._gate:
            if self._closed:
                raise EngineClosed("The engine has been shut down.")
            self._submitting += 1
        try:
            request, tokens, template = self._prepare(request)
            spec, thinking = intake.spec_for(request, self.spec, self.draft is not None), intake.opens_thinking(self.model, tokens)
            try:
                saved, saved_draft = self._reuse.read_saved(tokens, request, spec) if n == 1 else (None, None)
            except Exception as exc:  # the cache never fails a request: prefill instead
                promptcache.log.info("prompt cache: not read: %r", exc)
                saved = saved_draft = None
            jobs = []
            for i in range(n):
                seed = request.sampling.seed
                choice = request if i == 0 or seed is None else replace(request, sampling=replace(request.sampling, seed=seed + i))
                jobs.append(Job(choice, tokens, Stream(self._wake, len(tokens), template, thinking), spec,
                                 saved, saved_draft))
            self._inbox.put(jobs)
            return [job.stream for job in jobs]
        finally:
            with self._gate:
                self._submitting -= 1
                self._gate.notify_all()

    def keep_state(self, request: Request) -> int:
        """Save now, to the prompt cache, the KV an idle slot holds of this request's
        prompt (a chat's history on /save), however few tokens it adds; returns how many
        tokens are kept (0: the cache is off, or the prompt is short or held nowhere)."""
        if self.prompt_cache is None:
            return 0
        tokens = self._prepare(request)[1]
        errand = Keep(tokens, request.store_key)
        self._inbox.put(errand)
        if not errand.done.wait(60):
            return 0
        for cache in (self.prompt_cache, self.draft.prompt_cache if self.draft is not None else None):
            if cache is not None:
                cache.flush()
        return errand.kept

    def generate(self, request: Request) -> Result:
        """Run one request to the end (a convenience for scripts and tests)."""
        return self.submit(request).wait()


    def embedder(self) -> embed.Embedder:
        """The model's embedding context, made on first use (a context of its own, as long
        as one slot's)."""
        with self._gate:
            if self._closed:
                raise EngineClosed("The engine has been shut down.")
            if self._embedder is None:
                n_ctx = min(self.n_ctx, self.model.n_ctx_train or self.n_ctx)
                self._embedder = embed.Embedder(self.model, n_ctx=n_ctx, n_threads=self.config.n_threads)
            return self._embedder

    def close(self) -> None:
        """Stop the engine thread (cancelling what runs) and free llama.cpp's memory."""
        with self._gate:
            if self._closed:
                return
            self._closed = True
            self._gate.wait_for(lambda: self._submitting == 0)
        if self._embedder is not None:
            self._embedder.close()
        self._inbox.put(None)
        self._thread.join()
        self._batch.close()
        for cache in (self.prompt_cache, self.draft.prompt_cache if self.draft is not None else None):
            if cache is not None:
                cache.close()  # the states still being written
        if self.policy.calibrated:
            costs_cache.save_cached(self._costs_key, self.policy.costs)
        if self.draft is not None:
            self.draft.close()
        self.ctx.close()
        self.model.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def slot_states(self) -> list[SlotState]:
        """What each slot is doing (a snapshot, read from any thread)."""
        out = []
        for slot in self._slots:
            job, spec = slot.job, slot.spec
            state = "idle" if job is None else "prefilling" if slot.pending is None and slot.generated == 0 else "generating"
            out.append(SlotState(slot.seq, state, len(slot.tokens), spec.drafters if spec else "off",
                                 spec.tally.accepted / spec.tally.drafted if spec and spec.tally.drafted else None))
        return out

    def keep_texts(self, budget: int) -> None:
        """Keep ``budget`` tokens of recent requests' texts per store key to draft from (0: none)."""
        self.policy.store = Store(budget) if budget > 0 else None

    @property
    def costs(self):
        """The measured decode costs speculation decides with."""
        return self.policy.costs

    def _calibrate(self, draft_max: int) -> None:
        """Time the batch sizes not yet known, on an idle slot (an empty one if any: a
        slot's cached prompt is lost to calibration); else the costs are learnt online."""
        idle = sorted((s for s in self._slots if not s.active), key=lambda s: len(s.tokens))
        capacity = min(self._batch.capacity, self.n_ctx)
        if idle and self.policy.unmeasured(capacity, draft_max):
            seq = idle[0].seq
            self.ctx.seq_rm(seq, -1, -1)
            idle[0].tokens.clear()
            try:
                self.policy.calibrate(self.ctx, self._batch, seq, max(self.model.vocab.bos, 0), draft_max, capacity)
            except Exception:  # speculation then follows its online estimates alone
                self.ctx.seq_rm(seq, -1, -1)
                if self.draft is not None:
                    self.draft.forget(seq)

    def _wake(self) -> None:
        self._inbox.put(_WAKE)

    # ------------------------------------------------------------------ engine thread

    def _run(self) -> None:
        # llama.cpp's CPU thread pool belongs to the thread that first decodes: measure
        # costs here, on the engine thread, never on the caller's.
        try:
            if self.spec.mode != "off" or self.draft is not None:
                self._calibrate(self.spec.draft_max)
            while True:
                try:
                    busy = bool(self._waiting) or any(s.active for s in self._slots)
                    if not self._receive(block=not busy):
                        break
                    self._admit()
                    if any(s.active for s in self._slots):
                        self._step()
                except Exception as exc:  # never let the thread die with requests waiting
                    self._fail_all(exc)
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        """End every stream still open: running, waiting, or still in the inbox."""
        for slot in self._slots:
            if slot.active:
                try:
                    self._finish(slot, FinishReason.CANCELLED)
                except Exception:
                    pass  # its Result went out
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, list):
                self._waiting.append(item)
        for jobs in self._waiting:
            for job in jobs:
                job.stream._end(_empty_result(job, FinishReason.CANCELLED))
        self._waiting.clear()

    def _receive(self, block: bool) -> bool:
        """Move queued jobs to the waiting list; False once close() was called."""
        try:
            item = self._inbox.get() if block else self._inbox.get_nowait()
            while True:
                if item is None:
                    return False
                if isinstance(item, list):
                    self._waiting.append(item)
                elif isinstance(item, Keep):
                    self._reuse.keep_now(item)
                item = self._inbox.get_nowait()
        except queue.Empty:
            return True

    def _admit(self) -> None:
        """Give waiting jobs free slots, preferring the slot whose cache shares the longest
        prefix with the prompt (its KV entries are reused, not recomputed). A job that
        fails to start ends with its error; the others go on."""
        for jobs in list(self._waiting):
            if all(j.stream.cancelled for j in jobs):
                self._waiting.remove(jobs)
                for job in jobs:
                    job.stream._end(_empty_result(job, FinishReason.CANCELLED))
        while self._waiting:
            free = [s for s in self._slots if not s.active]
            jobs = self._waiting[0]
            beams = jobs[0].request.beams
            if len(free) < (beams or len(jobs)):  # first come, first served: the choices start together
                return
            self._waiting.pop(0)
            if beams:
                self._beam_search(jobs[0], free[:beams])
                continue
            leader = max(free, key=lambda s: common_prefix(s.tokens, jobs[0].prompt))
            others = sorted((s for s in free if s is not leader), key=lambda s: len(s.tokens))
            for slot, job in zip([leader, *others], jobs):
                try:
                    self._start(slot, job, follows=None if slot is leader else leader)
                except Exception as exc:
                    job.stream._end(_empty_result(job, FinishReason.ERROR, _message(exc)))
                    slot.job = slot.spec = slot.follows = None
                    slot.tokens.clear()
                    self.ctx.seq_rm(slot.seq, -1, -1)

    def _start(self, slot: Slot, job: Job, follows: Slot | None = None) -> None:
        """Set the slot up for the job; a slot that ``follows`` another gets that slot's
        prompt KV cache once it is prefilled (_fork) instead of prefilling its own."""
        if job.spec.mode != "off":
            self._calibrate(job.spec.draft_max)
        keep = min(common_prefix(slot.tokens, job.prompt), len(job.prompt) - 1) if job.request.cache_prompt else 0
        if slot.owner != job.request.store_key:  # one API key never starts from another's prompt
            keep = 0
        slot.owner = job.request.store_key
        if follows is not None:
            keep = 0
        elif job.request.cache_prompt:
            keep = self._reuse.start(slot, job, keep)
        self.ctx.seq_rm(slot.seq, keep, -1)
        del slot.tokens[keep:]
        params = job.request.sampling
        constraint = job.request.constraint
        slot.sampler = Sampler(params, job.prompt[-params.penalty_last_n :] if params.penalized else None,
                               [self.constraints.processor(constraint)] if constraint is not None else None)
        slot.text = TextAssembler(job.request.stop)
        slot.spec = self.policy.start(job.prompt, job.spec, job.request.store_key)
        slot.job = job
        slot.cached = keep
        slot.prefill_at = keep
        slot.pending = None
        slot.generated = 0
        slot.follows = follows
        slot.t_start = time.perf_counter()

    def _step(self) -> None:
        """One decode for every active slot: draft, then one target batch (pending tokens
        with their drafts, then prompt chunks), then verify and accept per slot."""
        for slot in self._slots:
            if slot.active and slot.job.stream.cancelled:
                self._finish(slot, FinishReason.CANCELLED)
        generating = [s for s in self._slots if s.active and s.pending is not None]
        self.steps += 1
        t0 = time.perf_counter()
        views = [self._view(s) for s in generating if s.spec is not None]
        proposals = self.policy.propose(views, len(generating)) if views else {}
        t_draft = time.perf_counter() - t0
        batch = self._batch
        batch.clear()
        first_row: dict[int, int] = {}
        for slot in generating:  # pending token + drafts, every row with logits
            n = len(slot.tokens)
            first_row[slot.seq] = batch.add(slot.pending, n, slot.seq, True)
            proposal = proposals.get(slot.seq)
            for i, token in enumerate(proposal.tokens if proposal else ()):
                batch.add(token, n + 1 + i, slot.seq, True)
        padded = self._pad(generating, proposals)
        feeding = any(s.active and s.pending is None and s.follows is None for s in self._slots)
        prefilled = self._prefill_chunks(self._prefill_budget(batch.n)) if feeding else []
        prompt_rows = sum(n for _, _, n in prefilled)
        if batch.n == 0:
            return
        t0 = time.perf_counter()
        self.ctx.decode(batch)
        t_verify = time.perf_counter() - t0
        if prompt_rows == 0:  # a pure generation step: what verification costs
            self.policy.costs.observe_target(batch.n, t_verify)
        else:
            self.policy.costs.observe_prompt(batch.n, prompt_rows, t_verify)
        for slot in generating:
            if slot.active:
                if slot.spec is not None:
                    slot.spec.tally.draft_s += t_draft
                    slot.spec.tally.verify_s += t_verify
                self._advance(slot, first_row[slot.seq], proposals.get(slot.seq), slot is padded)
        for slot, row, _ in prefilled:
            if slot.active and row >= 0:
                self._reuse.keep(slot)
                for other in self._slots:
                    if other.active and other.follows is slot:
                        self._fork(slot, other, row)
                self._first_token(slot, row)

    def _beam_search(self, job: Job, slots: list[Slot]) -> None:
        """Run a beam-search request to its end on ``slots`` (one sequence per
        hypothesis), here on the engine thread: other requests wait meanwhile."""
        for slot in slots:
            slot.tokens.clear()
        try:
            result = beam.answer(self.ctx, self._batch, self.model, [s.seq for s in slots], job.prompt, job.request,
                                 n_ctx=self.n_ctx, template=job.stream.template,
                                 cancelled=lambda: job.stream.cancelled)
        except Exception as exc:
            job.stream._end(_empty_result(job, FinishReason.ERROR, _message(exc)))
            return
        if result.text:
            job.stream._put(TokenEvent(result.text, -1))
        job.stream._end(result)

    def _fork(self, leader: Slot, slot: Slot, row: int) -> None:
        """Another choice of the leader's prompt: share its KV cache, sample its own
        first token from the same logits."""
        self.ctx.seq_rm(slot.seq, -1, -1)
        self.ctx.seq_cp(leader.seq, slot.seq, -1, -1)
        slot.tokens[:] = leader.tokens
        slot.prefill_at = len(slot.job.prompt)
        slot.follows = None
        self._first_token(slot, row)

    def _first_token(self, slot: Slot, row: int) -> None:
        token, _ = slot.sampler.sample(self.ctx.logits(row))
        if self._emit(slot, token, False, row):
            slot.pending = token

    def _view(self, slot: Slot) -> SlotView:
        max_more = (slot.job.request.max_tokens or 1 << 30) - slot.generated - 1
        return SlotView(slot.seq, slot.tokens, slot.pending, min(self.n_ctx - 1 - len(slot.tokens), max_more),
                        slot.spec, slot.sampler)

    def _prefill_budget(self, rows: int) -> int:
        """How many prompt rows this step may feed beside ``rows`` generating ones: all the
        batch has room for when nothing generates (or the costs are not yet timed), else
        as many as keep the prompt's share of the step's time at ``prefill_share``, so a
        long prompt arriving does not stall the requests generating beside it."""
        costs, room = self.policy.costs, self._batch.capacity - rows
        if rows == 0 or costs.prompt_token_s <= 0 or costs.t1 <= 0:
            return room
        share = TUNING.prefill_share
        n = int(share / (1.0 - share) * costs.target_s(rows) / costs.prompt_token_s)
        return min(room, max(TUNING.prefill_min_chunk, n))

    def _prefill_chunks(self, budget: int) -> list[tuple[Slot, int, int]]:
        """Add prompt chunks of the slots still prefilling, up to ``budget`` rows and the
        batch's room: (slot, the row of its last prompt token or -1 if not yet reached,
        rows added)."""
        batch, out = self._batch, []
        limit = min(batch.capacity, batch.n + budget)
        for slot in self._slots:
            if slot.active and slot.pending is None and slot.follows is None and batch.n < limit:
                prompt = slot.job.prompt
                start = slot.prefill_at
                end = min(len(prompt), start + limit - batch.n)
                row = -1
                for i in range(start, end):
                    row = batch.add(prompt[i], i, slot.seq, i == len(prompt) - 1)
                slot.tokens.extend(prompt[start:end])
                slot.prefill_at = end
                self.prefilled += end - start
                out.append((slot, row if end == len(prompt) else -1, end - start))
        return out

    def _pad(self, generating: list[Slot], proposals: dict[int, Proposal]) -> Slot | None:
        """Pad a batch of drafts to a larger size measured cheaper (Costs.pad_to): rows
        without logits on the last slot's sequence, past its drafts, removed again after
        verification. Only while no prompt is being fed, whose chunks fill the batch."""
        batch = self._batch
        if batch.n < 2 or any(s.active and s.pending is None for s in self._slots):
            return None
        slot = generating[-1]
        proposal = proposals.get(slot.seq)
        start = len(slot.tokens) + 1 + (len(proposal.tokens) if proposal else 0)
        rows = batch.n
        size = self.policy.costs.pad_to(rows, min(batch.capacity, rows + self.n_ctx - start))
        if size == rows:
            return None
        for i in range(size - rows):
            batch.add(slot.pending, start + i, slot.seq, False)
        return slot

    def _advance(self, slot: Slot, row0: int, proposal: Proposal | None, padded: bool = False) -> None:
        """Verify the slot's drafts against the target's logits, keep the accepted prefix
        in the KV cache (roll back the rest and any padding), and emit the new tokens."""
        t0 = time.perf_counter()
        sampler = slot.sampler
        drafts, qs = (proposal.tokens, proposal.qs) if proposal else ([], [])

        def target(i: int) -> Distribution:
            return sampler.distribution(self.ctx.logits(row0 + i), drafts[:i])

        accepted, nxt = verify(drafts, qs, target, sampler.rng, sampler.draw)
        n = len(slot.tokens)
        if accepted < len(drafts) or padded:  # roll back
            self.ctx.seq_rm(slot.seq, n + 1 + accepted, -1)
        slot.tokens.append(slot.pending)
        slot.tokens.extend(drafts[:accepted])
        slot.pending = None
        if slot.spec is not None:
            slot.spec.record(proposal, accepted)
            slot.spec.tally.sample_s += time.perf_counter() - t0
        out = drafts[:accepted] + [nxt]
        for i, token in enumerate(out):
            if not self._emit(slot, token, i < accepted, row0 + i):
                return
        if len(slot.tokens) >= self.n_ctx:  # no room to decode the token just emitted
            self._finish(slot, FinishReason.LENGTH)
        else:
            slot.pending = nxt

    def _emit(self, slot: Slot, token: int, from_draft: bool, row: int) -> bool:
        """Hand one token to the request; False when that ended it."""
        job = slot.job
        slot.sampler.accept(token)
        if slot.spec is not None:
            slot.spec.emitted(token)
        if slot.generated == 0:
            slot.t_first = time.perf_counter()
        slot.generated += 1
        if self.model.is_eog(token):
            self._finish(slot, FinishReason.EOS,
                         end_margin=top2_margin(self.ctx.logits(row)) if job.request.margins else None)
            return False
        text = slot.text.push(self.model.token_to_piece(token))
        lp, tops = None, ()
        if job.request.logprobs:
            lp = logprob(self.ctx.logits(row), token)
            if job.request.top_logprobs:
                tops = top_logprobs(self.ctx.logits(row), job.request.top_logprobs)
        margin = top2_margin(self.ctx.logits(row)) if job.request.margins else None
        job.stream._put(TokenEvent(text, token, from_draft, lp, margin, tops))
        if slot.text.stopped:
            self._finish(slot, FinishReason.STOP)
        elif job.request.max_tokens is not None and slot.generated >= job.request.max_tokens:
            self._finish(slot, FinishReason.LENGTH)
        else:
            return True
        return False

    def _finish(self, slot: Slot, reason: FinishReason, error: str | None = None,
                end_margin: float | None = None) -> None:
        """End the slot's request: its Result is sent whatever fails on the way."""
        job, text = slot.job, slot.text
        assert job is not None and text is not None
        if reason is not FinishReason.ERROR and slot.prefill_at == len(job.prompt) and slot.follows is None:
            self._reuse.keep(slot)  # the prompt and its answer: a chat's next turn starts here
        slot.job = None  # first: a failure below must not finish it twice
        slot.follows = None
        try:
            tail = text.finish() if reason is not FinishReason.STOP else ""
            if tail:
                job.stream._put(TokenEvent(tail, -1))
            if slot.prefill_at < len(job.prompt):  # stopped mid-prefill: forget the partial prompt
                del slot.tokens[slot.cached :]
                self.ctx.seq_rm(slot.seq, slot.cached, -1)
                for other in self._slots:  # choices waiting for this prompt end alike
                    if other.active and other.follows is slot:
                        self._finish(other, reason, error)
            self.policy.remember(job.request.store_key, slot.spec)
        finally:
            now = time.perf_counter()
            first = slot.t_first or now
            job.stream._end(
                Result(
                    text=text.text,
                    finish_reason=reason,
                    usage=Usage(len(job.prompt), slot.generated, slot.cached),
                    timings=Timings(first - slot.t_start, now - first, max(0, slot.generated - 1)),
                    template=job.stream.template,
                    error=error,
                    spec=slot.spec.stats() if slot.spec is not None else SpecStats("off", 0, 0, 0, {}, 0.0, 0.0, 0.0),
                    end_margin=end_margin,
                )
            )
            slot.pending = None
            slot.sampler = None
            slot.spec = None

    def _fail_all(self, exc: Exception) -> None:
        """A step failed: its batch's requests end with the error, and every cache starts
        afresh (the KV state of a failed batch is unknown)."""
        message = _message(exc)
        for slot in self._slots:
            if slot.active:
                try:
                    self._finish(slot, FinishReason.ERROR, message)
                except Exception:
                    pass  # its Result went out; the clean-up below covers the rest
            slot.tokens.clear()
        try:
            self.ctx.seq_rm(-1, -1, -1)
            if self.draft is not None:
                for slot in self._slots:
                    self.draft.forget(slot.seq)
        except Exception:
            pass


_WAKE = object()


def _message(exc: Exception) -> str:
    return exc.message if isinstance(exc, LocalspecError) else f"Internal error: {exc!r}"


def _empty_result(job: Job, reason: FinishReason, error: str | None = None) -> Result:
    return Result("", reason, Usage(len(job.prompt), 0), Timings(0.0, 0.0, 0), job.stream.template, error)
