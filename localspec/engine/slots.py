"""A request's job and the slot (a sequence of the context) it runs on: what the
scheduler and the prompt reuse (reuse.py) share."""

from __future__ import annotations

from dataclasses import dataclass, field

from localspec.engine import promptcache
from localspec.engine.sampling import Sampler
from localspec.engine.spec.state import SpecState
from localspec.engine.stream import Stream
from localspec.engine.text import TextAssembler
from localspec.types import Request, SpecConfig


@dataclass
class Saved:
    """A prompt prefix's state read from the prompt cache, to load into a sequence."""

    n: int  # leading prompt tokens it holds (and that are used)
    state: bytearray
    hit: promptcache.Hit


@dataclass
class Job:
    request: Request
    prompt: list[int]
    stream: Stream
    spec: SpecConfig
    saved: Saved | None = None  # the target's, read from disk at submit
    saved_draft: Saved | None = None  # the draft model's


@dataclass
class Slot:
    seq: int
    tokens: list[int] = field(default_factory=list)  # what the KV cache holds, in order
    job: Job | None = None
    sampler: Sampler | None = None
    text: TextAssembler | None = None
    prefill_at: int = 0  # next prompt index to feed
    pending: int | None = None  # sampled, emitted, not yet in the KV cache
    generated: int = 0
    cached: int = 0
    t_start: float = 0.0
    t_first: float = 0.0
    spec: SpecState | None = None  # None: this request runs plain
    follows: Slot | None = None  # another choice of the same prompt: its KV is copied from there
    owner: str = ""  # the store key whose request filled ``tokens``: no other key's request reuses them

    @property
    def active(self) -> bool:
        return self.job is not None


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    i = 0
    while a[i] == b[i]:
        i += 1
    return i
