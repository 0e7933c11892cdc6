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
from dataclasses import dataclass, field
from pathlib import Path

from localspec.engine import backend, templates
from localspec.engine.sampling import Sampler, logprob
from localspec.engine.stream import TextAssembler
from localspec.errors import EngineClosed, InvalidRequest, LocalspecError, PromptTooLong
from localspec.types import FinishReason, Request, Result, Timings, TokenEvent, Usage

DEFAULT_CTX = 4096


@dataclass(frozen=True)
class EngineConfig:
    n_ctx: int | None = None  # tokens per slot; None: the model's, capped at DEFAULT_CTX
    n_slots: int = 1
    n_batch: int = 512
    n_threads: int | None = None
    n_gpu_layers: int = 0
    kv_type: str = "f16"


class Stream:
    """The events of one request. Iterate it for ``TokenEvent``s; afterwards ``result``
    says how it ended. ``cancel()`` may be called from any thread."""

    def __init__(self, engine: Engine, prompt_tokens: int, template: str | None) -> None:
        self._engine = engine
        self._q: queue.SimpleQueue[TokenEvent | Result] = queue.SimpleQueue()
        self._cancelled = threading.Event()
        self.prompt_tokens = prompt_tokens
        self.template = template
        self.result: Result | None = None

    def __iter__(self):
        while self.result is None:
            item = self._q.get()
            if isinstance(item, Result):
                self.result = item
                return
            yield item

    def cancel(self) -> None:
        self._cancelled.set()
        self._engine._wake()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def wait(self) -> Result:
        """Consume the stream to its end and return the Result."""
        for _ in self:
            pass
        assert self.result is not None
        return self.result


@dataclass
class _Job:
    request: Request
    prompt: list[int]
    stream: Stream


@dataclass
class _Slot:
    seq: int
    tokens: list[int] = field(default_factory=list)  # what the KV cache holds, in order
    job: _Job | None = None
    sampler: Sampler | None = None
    text: TextAssembler | None = None
    prefill_at: int = 0  # next prompt index to feed
    pending: int | None = None  # sampled, emitted, not yet in the KV cache
    generated: int = 0
    cached: int = 0
    t_start: float = 0.0
    t_first: float = 0.0

    @property
    def active(self) -> bool:
        return self.job is not None


class Engine:
    """Loads a model, owns its context on a thread of its own, runs submitted requests."""

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
        self.load_s = time.perf_counter() - t0
        self._batch = backend.Batch(config.n_batch)
        self._slots = [_Slot(seq=i) for i in range(config.n_slots)]
        self._inbox: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._waiting: list[_Job] = []
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="localspec-engine", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ front-end API

    def prepare(self, request: Request) -> tuple[list[int], str | None]:
        """Validate the request and turn it into prompt tokens (in the caller's thread,
        so that bad input fails at once)."""
        _validate(request)
        template = None
        if request.messages is not None:
            rendered = templates.render(
                request.messages,
                self.model.chat_template,
                bos_token=self.model.vocab.bos_text,
                eos_token=self.model.vocab.eos_text,
                builtin=self.model.apply_builtin_template,
                builtin_name=self.model.builtin_template_name,
            )
            text, template = rendered.text, rendered.source
            bos = self.model.vocab.bos_text
            add_special = not (bos and text.startswith(bos))
        else:
            text, add_special = request.prompt or "", True
        tokens = self.model.tokenize(text, add_special=add_special, parse_special=True)
        if not tokens:
            raise InvalidRequest("The prompt is empty.")
        if len(tokens) >= self.n_ctx:
            raise PromptTooLong(
                f"The prompt is {len(tokens)} tokens but the context holds {self.n_ctx}; "
                f"shorten it or raise --ctx-size (this model supports up to "
                f"{self.model.n_ctx_train})."
            )
        return tokens, template

    def submit(self, request: Request) -> Stream:
        if self._closed:
            raise EngineClosed("The engine has been shut down.")
        tokens, template = self.prepare(request)
        stream = Stream(self, len(tokens), template)
        self._inbox.put(_Job(request, tokens, stream))
        return stream

    def generate(self, request: Request) -> Result:
        """Run one request to the end (a convenience for scripts and tests)."""
        return self.submit(request).wait()

    def close(self) -> None:
        """Stop the engine thread (cancelling what runs) and free llama.cpp's memory."""
        if self._closed:
            return
        self._closed = True
        self._inbox.put(None)
        self._thread.join()
        self._batch.close()
        self.ctx.close()
        self.model.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _wake(self) -> None:
        self._inbox.put(_WAKE)

    # ------------------------------------------------------------------ engine thread

    def _run(self) -> None:
        while True:
            busy = bool(self._waiting) or any(s.active for s in self._slots)
            if not self._receive(block=not busy):
                break
            self._admit()
            if any(s.active for s in self._slots):
                try:
                    self._step()
                except Exception as exc:  # never let the thread die with requests waiting
                    self._fail_all(exc)
        for slot in self._slots:
            if slot.active:
                self._finish(slot, FinishReason.CANCELLED)
        for job in self._waiting:
            job.stream._q.put(_empty_result(job, FinishReason.CANCELLED))

    def _receive(self, block: bool) -> bool:
        """Move queued jobs to the waiting list; False once close() was called."""
        try:
            item = self._inbox.get() if block else self._inbox.get_nowait()
            while True:
                if item is None:
                    return False
                if isinstance(item, _Job):
                    self._waiting.append(item)
                item = self._inbox.get_nowait()
        except queue.Empty:
            return True

    def _admit(self) -> None:
        """Give waiting jobs free slots, preferring the slot whose cache shares the longest
        prefix with the prompt (its KV entries are reused, not recomputed)."""
        for job in [j for j in self._waiting if j.stream.cancelled]:
            self._waiting.remove(job)
            job.stream._q.put(_empty_result(job, FinishReason.CANCELLED))
        while self._waiting:
            free = [s for s in self._slots if not s.active]
            if not free:
                return
            job = self._waiting.pop(0)
            slot = max(free, key=lambda s: _common_prefix(s.tokens, job.prompt))
            self._start(slot, job)

    def _start(self, slot: _Slot, job: _Job) -> None:
        keep = min(_common_prefix(slot.tokens, job.prompt), len(job.prompt) - 1)
        self.ctx.seq_rm(slot.seq, keep, -1)
        del slot.tokens[keep:]
        slot.job = job
        slot.cached = keep
        slot.prefill_at = keep
        slot.pending = None
        slot.generated = 0
        params = job.request.sampling
        slot.sampler = Sampler(params, job.prompt[-params.penalty_last_n :] if params.penalized else None)
        slot.text = TextAssembler(job.request.stop)
        slot.t_start = time.perf_counter()

    def _step(self) -> None:
        for slot in self._slots:
            if slot.active and slot.job.stream.cancelled:
                self._finish(slot, FinishReason.CANCELLED)
        batch = self._batch
        batch.clear()
        rows: list[tuple[_Slot, int]] = []
        for slot in self._slots:  # generating slots first: one token each
            if slot.active and slot.pending is not None:
                rows.append((slot, batch.add(slot.pending, len(slot.tokens), slot.seq, True)))
                slot.tokens.append(slot.pending)
        for slot in self._slots:  # then prompt chunks, as far as the batch has room
            if slot.active and slot.pending is None and batch.n < batch.capacity:
                prompt = slot.job.prompt
                end = min(len(prompt), slot.prefill_at + batch.capacity - batch.n)
                for i in range(slot.prefill_at, end):
                    row = batch.add(prompt[i], i, slot.seq, i == len(prompt) - 1)
                slot.tokens.extend(prompt[slot.prefill_at : end])
                slot.prefill_at = end
                if end == len(prompt):
                    rows.append((slot, row))
        if batch.n == 0:
            return
        self.ctx.decode(batch)
        for slot, row in rows:
            if slot.active:
                self._accept(slot, self.ctx.logits(row))

    def _accept(self, slot: _Slot, logits) -> None:
        """Sample the slot's next token from ``logits`` and emit it."""
        job = slot.job
        token, _ = slot.sampler.sample(logits)
        slot.sampler.accept(token)
        now = time.perf_counter()
        if slot.generated == 0:
            slot.t_first = now
        slot.generated += 1
        if self.model.is_eog(token):
            self._finish(slot, FinishReason.EOS)
            return
        text = slot.text.push(self.model.token_to_piece(token))
        lp = logprob(logits, token) if job.request.logprobs else None
        job.stream._q.put(TokenEvent(text, token, False, lp))
        if slot.text.stopped:
            self._finish(slot, FinishReason.STOP)
        elif job.request.max_tokens is not None and slot.generated >= job.request.max_tokens:
            self._finish(slot, FinishReason.LENGTH)
        elif len(slot.tokens) >= self.n_ctx:  # no room to decode the token just sampled
            self._finish(slot, FinishReason.LENGTH)
        else:
            slot.pending = token

    def _finish(self, slot: _Slot, reason: FinishReason, error: str | None = None) -> None:
        job = slot.job
        assert job is not None and slot.text is not None
        tail = slot.text.finish() if reason is not FinishReason.STOP else ""
        if tail:
            job.stream._q.put(TokenEvent(tail, -1))
        if slot.prefill_at < len(job.prompt):  # stopped mid-prefill: forget the partial prompt
            self.ctx.seq_rm(slot.seq, slot.cached, -1)
            del slot.tokens[slot.cached :]
        now = time.perf_counter()
        first = slot.t_first or now
        job.stream._q.put(
            Result(
                text=slot.text.text,
                finish_reason=reason,
                usage=Usage(len(job.prompt), slot.generated, slot.cached),
                timings=Timings(first - slot.t_start, now - first, max(0, slot.generated - 1)),
                template=job.stream.template,
                error=error,
            )
        )
        slot.job = None
        slot.pending = None
        slot.sampler = None

    def _fail_all(self, exc: Exception) -> None:
        message = exc.message if isinstance(exc, LocalspecError) else f"Internal error: {exc!r}"
        for slot in self._slots:
            if slot.active:
                self._finish(slot, FinishReason.ERROR, message)
            # the KV state of a failed batch is unknown: start every slot afresh
            self.ctx.seq_rm(slot.seq, -1, -1)
            slot.tokens.clear()


_WAKE = object()


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _empty_result(job: _Job, reason: FinishReason) -> Result:
    return Result("", reason, Usage(len(job.prompt), 0), Timings(0.0, 0.0, 0), job.stream.template)


def _validate(request: Request) -> None:
    if request.prompt is None and request.messages is None:
        raise InvalidRequest("A request needs a prompt or messages.")
    if request.prompt is not None and not request.prompt.strip():
        raise InvalidRequest("The prompt is empty.")
    if request.messages is not None and not any(m.content.strip() for m in request.messages):
        raise InvalidRequest("The prompt is empty.")
    s = request.sampling
    if not 0.0 < s.top_p <= 1.0:
        raise InvalidRequest(f"top_p must be in (0, 1], not {s.top_p}.")
    if not 0.0 <= s.min_p <= 1.0:
        raise InvalidRequest(f"min_p must be in [0, 1], not {s.min_p}.")
    if s.repeat_penalty <= 0.0:
        raise InvalidRequest(f"repeat_penalty must be positive, not {s.repeat_penalty}.")
    if s.temperature < 0.0:
        raise InvalidRequest(f"temperature must be 0 or more, not {s.temperature}.")
    if request.max_tokens is not None and request.max_tokens < 1:
        raise InvalidRequest(f"max_tokens must be at least 1, not {request.max_tokens}.")
