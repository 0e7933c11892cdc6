"""scripts/agent_trace.py, the agent trace the closing notes measure the store with: its
bound arithmetic, and a short run through two live servers (store off and on) with the
unrelated requests after and alongside the trace."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("agent_trace", ROOT / "scripts" / "agent_trace.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(name: str, tokens: int, ms: float) -> dict:
    return {"request": name, "tokens": tokens, "decode_ms": ms, "tokens_per_s": tokens / ms * 1000}


def test_the_bound_puts_every_retry_at_the_rounds_fastest_rate_and_leaves_the_rest():
    trace = _script()
    off = [_row("task 1", 100, 2000), _row("task 2", 50, 500), _row("task 1 (retry)", 100, 2000)]
    on = [_row("task 1", 100, 1900), _row("task 2", 50, 400), _row("task 1 (retry)", 100, 800)]
    assert trace.overall(off) == pytest.approx(250 / 4.5)
    # the fastest request with the store on ran at 125 tok/s: the retry at best in 0.8 s,
    # the others as fast as with the store off (2 s and 0.5 s)
    assert trace.bound(off, on) == pytest.approx(250 / (2.0 + 0.5 + 100 / 125))


def test_a_short_trace_runs_both_servers_and_reports_the_bound(smollm2: Path, tmp_path: Path):
    out = tmp_path / "trace.json"
    proc = subprocess.run([sys.executable, "scripts/agent_trace.py", str(smollm2), "--max-tokens", "16",
                           "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    [(off, on)] = json.loads(out.read_text())  # one round, both configurations
    assert (off["store_tokens"], on["store_tokens"]) == (0, 32768)
    for run in (off, on):
        names = [r["request"] for r in run["trace"]]
        assert len(names) == 10 and names[:3] == ["task 1", "task 2", "task 1 (retry)"]
        assert len(run["unrelated"]) == 3 and len(run["alongside"]) == 3
        assert all(r["tokens"] > 0 and r["tokens_per_s"] > 0 for r in run["trace"] + run["unrelated"] + run["alongside"])
    assert "store 32768: at most" in proc.stdout and "alongside the retries" in proc.stdout
