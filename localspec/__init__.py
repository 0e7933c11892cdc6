"""localspec: a local LLM runner on llama.cpp in which speculative decoding simply works."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from localspec.types import (
    FinishReason,
    Message,
    Request,
    Result,
    SamplingParams,
    TokenEvent,
)

__version__ = "0.1.0"

if TYPE_CHECKING:
    from localspec.engine import Engine, EngineConfig, Stream


def __getattr__(name: str) -> Any:
    # The engine imports llama.cpp (slow to load): only when asked for, so that the CLI's
    # --help and shell completion stay instant.
    if name in ("Engine", "EngineConfig", "Stream"):
        from localspec import engine

        return getattr(engine, name)
    raise AttributeError(name)


def load(model: str | None = None, **config: Any) -> Engine:
    """Load ``model`` (a .gguf path; None: the default model) into a running Engine."""
    from localspec.engine import Engine, EngineConfig
    from localspec.resolve import resolve_model

    return Engine(resolve_model(model), EngineConfig(**config))


__all__ = [
    "Engine",
    "EngineConfig",
    "FinishReason",
    "Message",
    "Request",
    "Result",
    "SamplingParams",
    "Stream",
    "TokenEvent",
    "load",
]
