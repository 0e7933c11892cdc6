"""The engine: llama.cpp contexts on one thread, sampling, streaming text."""

from localspec.engine import backend  # noqa: F401  (first: llama.cpp's libraries load before numpy's)
from localspec.engine.config import EngineConfig
from localspec.engine.scheduler import Engine
from localspec.engine.stream import Stream

__all__ = ["Engine", "EngineConfig", "Stream"]
