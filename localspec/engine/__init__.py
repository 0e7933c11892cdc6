"""The engine: llama.cpp contexts on one thread, sampling, streaming text."""

from localspec.engine.scheduler import Engine, EngineConfig
from localspec.engine.stream import Stream

__all__ = ["Engine", "EngineConfig", "Stream"]
