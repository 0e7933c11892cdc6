"""localspec: a local LLM runner on llama.cpp in which speculative decoding simply works.

    import localspec
    engine = localspec.open_engine("model.gguf", slots=2)   # or a Hub name, a profile
    with engine:
        for event in engine.submit(localspec.Request(prompt="def fib(n):", max_tokens=64)):
            print(event.text, end="", flush=True)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from localspec.types import (
    FinishReason,
    Message,
    Request,
    Result,
    SamplingParams,
    SpecConfig,
    TokenEvent,
)

__version__ = "0.1.0"

if TYPE_CHECKING:
    from localspec.conversation import Conversation
    from localspec.engine import Engine, EngineConfig, Stream
    from localspec.loader import open_engine
    from localspec.settings import Settings


def __getattr__(name: str) -> Any:
    # The engine imports llama.cpp (slow to load): only when asked for, so that the CLI's
    # --help and shell completion stay instant.
    if name in ("Engine", "EngineConfig", "Stream"):
        from localspec import engine

        return getattr(engine, name)
    if name == "open_engine":
        from localspec.loader import open_engine

        return open_engine
    if name == "Conversation":
        from localspec.conversation import Conversation

        return Conversation
    if name == "Settings":
        from localspec.settings import Settings

        return Settings
    raise AttributeError(name)


__all__ = [
    "Conversation",
    "Engine",
    "EngineConfig",
    "FinishReason",
    "Message",
    "Request",
    "Result",
    "SamplingParams",
    "Settings",
    "SpecConfig",
    "Stream",
    "TokenEvent",
    "open_engine",
]
