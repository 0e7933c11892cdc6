"""The plain data that flows between front ends and the engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class FinishReason(str, Enum):
    STOP = "stop"  # a stop string matched
    LENGTH = "length"  # max_tokens reached or the slot's context is full
    EOS = "eos"  # the model produced an end-of-generation token
    CANCELLED = "cancelled"  # the caller cancelled the stream (Ctrl-C, client gone)
    ERROR = "error"


@dataclass(frozen=True)
class SamplingParams:
    """Sampling transforms, applied in llama.cpp's order: penalties, top-k, top-p,
    min-p, then temperature. ``temperature <= 0`` is greedy (after penalties)."""

    temperature: float = 0.8
    top_k: int = 40  # <= 0: off
    top_p: float = 0.95  # >= 1: off
    min_p: float = 0.05  # <= 0: off
    repeat_penalty: float = 1.0  # 1: off
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_last_n: int = 64  # how many recent tokens the penalties look at
    seed: int | None = None  # None: a fresh random seed per request

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def penalized(self) -> bool:
        return (
            self.repeat_penalty != 1.0
            or self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
        )


@dataclass(frozen=True)
class Message:
    role: str
    content: str


@dataclass
class Request:
    """One generation: a raw ``prompt``, chat ``messages`` (rendered with the model's chat
    template) or ``prompt_tokens``."""

    prompt: str | None = None
    messages: list[Message] | None = None
    prompt_tokens: list[int] | None = None  # already tokenized (no template, no BOS added)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int | None = None  # None: until EOS or the context is full
    stop: list[str] = field(default_factory=list)
    logprobs: bool = False  # fill TokenEvent.logprob (costs a softmax per token)
    spec: str | None = None  # speculation for this request: off|ngram|draft|auto; None: the engine's
    margins: bool = False  # fill TokenEvent.margin (top-1 minus top-2 logit), for diagnosis
    # Reuse a slot's cached prompt prefix (llama.cpp's cache_prompt). A reused prefix is
    # decoded in other batches than a fresh prefill, which moves Q4 logits by ~0.1: the
    # benchmark turns it off so that runs differ only in speculation.
    cache_prompt: bool = True


@dataclass(frozen=True)
class TokenEvent:
    """One generated token. ``text`` is what can be shown now: never half a UTF-8
    character, never the start of a possible stop string (held back until resolved)."""

    text: str
    token_id: int
    from_draft: bool = False
    logprob: float | None = None
    margin: float | None = None  # the target's top-1 minus top-2 logit where it chose this token


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0  # prompt tokens reused from the slot's previous request

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Timings:
    prompt_s: float  # queue exit to first token: prefill
    decode_s: float  # first token to last
    decode_tokens: int  # target decodes after the first token

    @property
    def decode_tokens_per_s(self) -> float:
        return self.decode_tokens / self.decode_s if self.decode_s > 0 else 0.0


@dataclass(frozen=True)
class SpecStats:
    """What speculation did for one request (``mode`` is what actually ran)."""

    mode: str  # off, ngram, draft, or ngram+draft
    drafted: int
    accepted: int
    steps: int  # target decodes after the prompt
    draft_lengths: dict[int, int]  # k chosen -> how many steps
    draft_s: float
    verify_s: float
    sample_s: float

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_per_step(self) -> float:
        return self.accepted / self.steps if self.steps else 0.0


@dataclass(frozen=True)
class Result:
    """How a stream ended; ``error`` holds the sentence when finish_reason is ERROR."""

    text: str
    finish_reason: FinishReason
    usage: Usage
    timings: Timings
    template: str | None = None  # which chat template rendered the prompt
    error: str | None = None
    spec: SpecStats | None = None
