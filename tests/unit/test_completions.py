"""The shell completion scripts in completions/ are current, and complete what they should."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from localspec.cli.completion import FILES, script

COMPLETIONS = Path(__file__).resolve().parents[2] / "completions"


@pytest.mark.parametrize("shell", sorted(FILES))
def test_the_committed_script_is_current(shell: str) -> None:
    committed = (COMPLETIONS / FILES[shell]).read_text()
    assert committed == script(shell), "regenerate with: python -m localspec.cli.completion"


def _complete(words: str, tmp_path: Path) -> list[str]:
    env = {**os.environ, "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
           "_LOCALSPEC_COMPLETE": "complete_bash", "LOCALSPEC_CONFIG_DIR": str(tmp_path / "config"),
           "HF_HUB_CACHE": str(tmp_path / "hf")}
    out = subprocess.run([sys.executable, "-m", "localspec"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_commands_profiles_and_models_complete(tmp_path: Path) -> None:
    assert "profiles" in _complete("localspec pro", tmp_path)
    assert _complete("localspec run qwen", tmp_path) == ["qwen2.5-coder-1.5b", "qwen2.5-coder-7b"]
    assert _complete("localspec profiles show gem", tmp_path) == ["gemma-3-4b-it"]
    assert "--draft-max" in _complete("localspec run --draft-m", tmp_path)
