"""scripts/gpu-check.sh's quick path (tiny shapes, this machine), as CI runs it: the
figures it gathers and the files it leaves, so that the GPU run is known to work before a
GPU machine is lent."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_quick_path_measures_costs_and_predicts_speedups(qwen_05b: Path, tmp_path: Path):
    out = tmp_path / "out"
    env = {**os.environ, "GPU_CHECK_WORK": str(tmp_path / "work"), "LLAMA_BENCH": str(tmp_path / "none")}
    proc = subprocess.run(["bash", "scripts/gpu-check.sh", "--quick", "--out", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["costs.md", "figures.json", "report.txt", "setup.log"]
    figures = json.loads((out / "figures.json").read_text())
    assert figures["mode"] == "quick" and figures["models"]["target"] == "tiny"
    costs = {int(b): ms for b, ms in figures["costs_ms"].items()}
    assert {1, 2, 4, 8, 16, 32, 64} <= set(costs) and all(ms > 0 for ms in costs.values())
    assert costs[64] > costs[1] and figures["draft_step_ms"] > 0
    assert figures["localspec_plain_tok_s"]["median"] > 0 and len(figures["localspec_plain_tok_s"]["runs"]) == 3
    assert figures["llama_bench"] is None  # no binary given: said, not guessed
    data = ROOT / "tests/unit/data"
    recorded = json.loads((data / "qwen2.5-coder-1.5b-greedy.json").read_text())
    agent = json.loads((data / "qwen2.5-coder-1.5b-agent-greedy.json").read_text())
    assert set(figures["predicted"]) == set(recorded) | set(agent)
    for name, row in figures["predicted"].items():
        assert row["ngram"] > 0 and row["ngram_oracle"] > 0 and row["ngram_simple"] > 0 and row["ngram_mod"] > 0
        if name in recorded:  # the draft model's matches were recorded for the bench's prompts
            assert row["draft_best"] >= 1.0 and 0 <= row["draft_k"] <= 16
    report = (out / "report.txt").read_text()
    assert "$ localspec doctor" in report and "$ localspec plan" in report and "| batch rows | ms |" in report
    assert "== check (quick)" in (out / "setup.log").read_text()


@pytest.mark.parametrize("args,words", [(["--gpu"], "unknown option"), (["--out"], "--out needs a folder")])
def test_bad_options_are_one_sentence(args, words):
    proc = subprocess.run(["bash", "scripts/gpu-check.sh", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and words in proc.stderr
