"""Turning what a user names (a path, the default) into a local GGUF file."""

from localspec.resolve.local import resolve_model

__all__ = ["resolve_model"]
