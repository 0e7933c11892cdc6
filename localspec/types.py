"""The plain data that flows between front ends and the engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from localspec.errors import InvalidRequest

MODES = ("auto", "ngram", "draft", "off")
DRAFT_MAX_LIMIT = 256  # a draft longer than this never paid on any machine measured
NGRAM_LIMIT = 16


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
    seed: int | None = None  # None: a fresh random seed per request; any integer
    # Added to a token's logit before every transform (OpenAI's logit_bias: -100 to 100;
    # -100 bans the token, 100 all but forces it).
    logit_bias: dict[int, float] = field(default_factory=dict)

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
class SpecConfig:
    """Speculative decoding for a request (or an engine's default). Checked where it is
    built, with one sentence naming the setting, so every front end refuses alike."""

    mode: str = "auto"  # off | ngram | draft | auto (n-gram when it matches, else the draft)
    draft_max: int = 64  # an upper bound: the engine picks k each step from measured costs
    draft_min: int = 0  # when speculating, draft at least this many
    draft_p_min: float = 0.75  # stop drafting when the draft's top probability falls below
    ngram_min: int = 1
    ngram_max: int = 4
    adaptive: bool = True  # False: always draft draft_max (for measuring)
    share: bool = True  # search and feed the engine's store of earlier requests' texts, where it keeps one

    def __post_init__(self) -> None:
        mode = self.mode.lower() if isinstance(self.mode, str) else self.mode
        if mode not in MODES:
            raise InvalidRequest(f"Unknown speculation mode {self.mode!r}; use one of {', '.join(MODES)}.")
        object.__setattr__(self, "mode", mode)
        for name, lo, hi in (("draft_max", 1, DRAFT_MAX_LIMIT), ("draft_min", 0, DRAFT_MAX_LIMIT),
                             ("ngram_min", 1, NGRAM_LIMIT), ("ngram_max", 1, NGRAM_LIMIT)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise InvalidRequest(f"{name} must be an integer from {lo} to {hi}, not {value!r}.")
        if not isinstance(self.draft_p_min, (int, float)) or not 0.0 <= self.draft_p_min <= 1.0:
            raise InvalidRequest(f"draft_p_min must be from 0 to 1, not {self.draft_p_min!r}.")
        if self.draft_min > self.draft_max:
            raise InvalidRequest(f"draft_min ({self.draft_min}) must not exceed draft_max ({self.draft_max}).")
        if self.ngram_min > self.ngram_max:
            raise InvalidRequest(f"ngram_min ({self.ngram_min}) must not exceed ngram_max ({self.ngram_max}).")


CONSTRAINT_KINDS = ("json_schema", "json_object", "gbnf", "lark", "regex")
# llguidance's grammar checks grow faster than linearly with size (a 200 KB Lark grammar of
# 30k literals took 0.55 s, 2 MB over 300 s, under its own limits): a bigger one is refused.
MAX_CONSTRAINT_CHARS = 128 * 1024


@dataclass(frozen=True)
class Constraint:
    """What the output must match: a JSON schema (its JSON text), any JSON object, a GBNF
    or Lark grammar, or a regex. Compiled and checked when the request is submitted."""

    kind: str
    text: str = ""

    def __post_init__(self) -> None:
        if self.kind not in CONSTRAINT_KINDS:
            raise InvalidRequest(f"Unknown constraint kind {self.kind!r}; use one of {', '.join(CONSTRAINT_KINDS)}.")
        if self.kind != "json_object" and not (isinstance(self.text, str) and self.text.strip()):
            raise InvalidRequest(f"The {self.kind.replace('_', ' ')} constraint is empty.")
        if len(self.text) > MAX_CONSTRAINT_CHARS:
            raise InvalidRequest(f"The {self.kind.replace('_', ' ')} constraint is {len(self.text):,} characters; "
                                 f"at most {MAX_CONSTRAINT_CHARS:,} are accepted.")


@dataclass(frozen=True)
class Tool:
    """A function the model may call: OpenAI's function definition."""

    name: str
    description: str = ""
    parameters: dict = field(default_factory=lambda: {"type": "object", "properties": {}})  # a JSON schema


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # a JSON object's text, as OpenAI's API carries it
    id: str = ""


TOOL_CHOICES = ("auto", "none", "required")


@dataclass(frozen=True)
class Message:
    """A chat message; an assistant's may carry the tool calls it made, and a ``tool``
    message answers the call ``tool_call_id``."""

    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None  # a tool message: the function that answered


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
    top_logprobs: int = 0  # and TokenEvent.top_logprobs with this many alternatives (0-20)
    # Speculation for this request: None, the engine's; a mode name, the engine's settings
    # with that mode; a SpecConfig, its own (two requests may run with different ones).
    spec: SpecConfig | str | None = None
    margins: bool = False  # fill TokenEvent.margin (top-1 minus top-2 logit), for diagnosis
    # Reuse a slot's cached prompt prefix (llama.cpp's cache_prompt). A reused prefix is
    # decoded in other batches than a fresh prefill, which moves Q4 logits by ~0.1: the
    # benchmark turns it off so that runs differ only in speculation.
    cache_prompt: bool = True
    constraint: Constraint | None = None  # the output must match it (JSON schema, grammar, regex)
    # Beam search with this many hypotheses (each on a KV slot of its own; no sampling, no
    # speculation); scored by summed logprob / length ** length_penalty.
    beams: int | None = None
    length_penalty: float = 1.0
    early_stopping: bool = False  # stop as soon as `beams` hypotheses have ended
    store_key: str = ""  # whose earlier texts n-gram drafting may copy (one store per key)
    # Functions the model may call (the chat template is given them). Under "auto" a call's
    # arguments are held to its parameter schema once the call's opening marker appears;
    # under "required" or a named ``tool_choice`` (a function's name), from the first token.
    tools: tuple[Tool, ...] = ()
    tool_choice: str = "auto"  # auto | none | required | the name of one of ``tools``
    parallel_tool_calls: bool = True


@dataclass(frozen=True)
class TokenEvent:
    """One generated token. ``text`` is what can be shown now: never half a UTF-8
    character, never the start of a possible stop string (held back until resolved)."""

    text: str
    token_id: int
    from_draft: bool = False
    logprob: float | None = None
    margin: float | None = None  # the target's top-1 minus top-2 logit where it chose this token
    top_logprobs: tuple[tuple[int, float], ...] = ()  # (token id, logprob), best first


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
    by_drafter: dict[str, tuple[int, int]] = field(default_factory=dict)  # ngram|draft -> (drafted, accepted)
    accepted_at: dict[int, int] = field(default_factory=dict)  # draft position (1-based) -> times kept

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_per_step(self) -> float:
        return self.accepted / self.steps if self.steps else 0.0


@dataclass(frozen=True)
class BeamHypothesis:
    text: str
    score: float  # logprob / tokens ** length_penalty
    logprob: float
    token_ids: tuple[int, ...]
    finish_reason: FinishReason


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
    beams: tuple[BeamHypothesis, ...] = ()  # beam search: every kept hypothesis, best first
    end_margin: float | None = None  # with margins, ended by EOS: the top-2 gap where it chose to end
