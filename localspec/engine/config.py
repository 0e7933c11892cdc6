"""What an engine is opened with, and what it reports of its slots."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from localspec.types import SpecConfig

DEFAULT_CTX = 4096


@dataclass(frozen=True)
class EngineConfig:
    n_ctx: int | None = None  # tokens per slot; None: the model's, capped at DEFAULT_CTX
    n_slots: int = 1
    n_batch: int = 512
    n_threads: int | None = None
    n_gpu_layers: int = 0
    kv_type: str = "f16"
    draft_model: Path | None = None  # a GGUF with the target's tokenizer
    draft_gpu_layers: int = 0
    spec: SpecConfig = SpecConfig()  # for requests that do not bring their own
    prompt_cache_dir: Path | None = None  # where long prompts' KV states are kept (None: not kept)
    prompt_cache_size: int = 4 << 30  # bytes the folder may hold


@dataclass(frozen=True)
class SlotState:
    seq: int
    state: str  # idle, prefilling or generating
    cached_tokens: int  # what the slot's KV cache holds
    spec: str  # the drafters its request may use: off, ngram, draft or auto
    acceptance: float | None  # of its drafts so far
