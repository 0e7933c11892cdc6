"""Turning what a user names (a path, a Hub name, the default) into a local GGUF file."""

from __future__ import annotations

from pathlib import Path

from localspec.resolve.hub import Hub, Progress, Resolved
from localspec.resolve.local import check_gguf, embedded_model, resolve_model as _resolve_local
from localspec.resolve.names import HubRef, looks_like_hub, parse_hub


def resolve_model(
    name: str | None,
    *,
    offline: bool = False,
    progress: Progress | None = None,
    download: bool = True,
) -> Path:
    """A model name -> the GGUF file llama.cpp loads. ``None`` is the embedded default;
    a Hub name is downloaded into the HF cache if it is not there yet."""
    if name is not None and looks_like_hub(name):
        got = Hub.from_env(offline=offline).resolve(parse_hub(name), download=download, progress=progress)
        return check_gguf(got.path)
    return _resolve_local(name)


__all__ = [
    "Hub", "HubRef", "Progress", "Resolved", "check_gguf", "embedded_model", "looks_like_hub",
    "parse_hub", "resolve_model",
]
