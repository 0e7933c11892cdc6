"""`localspec run --n N`: N answers from one prompt, different, each the answer a single
run with its seed gives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _run(model: Path, *args: str) -> list[dict]:
    got = subprocess.run([sys.executable, "-m", "localspec", "run", str(model), "--raw", "abc abc", "-n", "16",
                          "--temperature", "0.8", "--json", "-c", "256", *args], capture_output=True, text=True,
                         timeout=120)
    assert got.returncode == 0, got.stderr
    return [json.loads(line) for line in got.stdout.splitlines()]


def test_n_answers_differ_and_each_is_its_seeds_answer(tiny_model: Path):
    four = _run(tiny_model, "--n", "4", "--seed", "7")
    assert [r["index"] for r in four] == [0, 1, 2, 3]
    assert len({r["text"] for r in four}) == 4
    assert all(r["usage"]["completion_tokens"] == 16 for r in four)
    assert _run(tiny_model, "--seed", "9")[0]["text"] == four[2]["text"]  # answer i samples with seed 7 + i
    again = _run(tiny_model, "--n", "4", "--seed", "7")
    assert [r["text"] for r in again] == [r["text"] for r in four]  # reproducible
