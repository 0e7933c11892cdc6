"""localspec: a local LLM runner on llama.cpp in which speculative decoding simply works.

    import localspec
    engine = localspec.open_engine("model.gguf", slots=2)   # or a Hub name, a profile
    with engine:
        for event in engine.submit(localspec.Request(prompt="def fib(n):", max_tokens=64)):
            print(event.text, end="", flush=True)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any


def _load_llama_first() -> None:
    """Open llama.cpp's shared library before any other native code (numpy's): on the
    H200 a CUDA build of llama.cpp opened after numpy crashed in every model load
    (llama_model::print_info), and opened first it loads (issue 17's note). Only the
    library is opened here, in milliseconds; the engine imports llama_cpp when needed,
    and any failure is left for that import to report."""
    import ctypes
    import importlib.util
    import os
    import sys

    if not sys.platform.startswith("linux"):
        return
    base = os.environ.get("LLAMA_CPP_LIB_PATH")  # where llama_cpp itself looks first
    if base is None:
        spec = importlib.util.find_spec("llama_cpp")
        if spec is None or not spec.submodule_search_locations:
            return
        base = os.path.join(spec.submodule_search_locations[0], "lib")
    try:
        ctypes.CDLL(os.path.join(base, "libllama.so"))
    except OSError:
        pass


_load_llama_first()

from localspec.types import (  # noqa: E402
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
