"""The planner's estimates against what llama.cpp really allocates on this CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from localspec.cli import app
from localspec.engine import backend
from localspec.plan import compute_bytes, kv_bytes
from localspec.resolve.gguf_info import read_info


@pytest.mark.parametrize("which", ["smollm2", "qwen_05b"])
def test_weights_and_kv_estimates_match_llama_cpp_within_10_percent(which, request):
    path = request.getfixturevalue(which)
    info = read_info(path)
    model = backend.Model(path)
    ctx = backend.Context(model, n_ctx=2048 * 2, n_seq=2)  # as the engine does: per slot x slots
    try:
        assert model.reported_weights_bytes > 0 and ctx.reported_kv_bytes > 0
        assert info.weights_bytes == pytest.approx(model.reported_weights_bytes, rel=0.10)
        assert kv_bytes(info, 2048 * 2, "f16") == pytest.approx(ctx.reported_kv_bytes, rel=0.10)
        assert info.n_layer == model.n_layer and info.n_vocab == model.n_vocab
        assert compute_bytes(info) > 0
    finally:
        ctx.close()
        model.close()


def test_plan_command_prints_a_cpu_plan_and_json(tiny_model: Path):
    runner = CliRunner()
    res = runner.invoke(app, ["plan", str(tiny_model), "--draft", str(tiny_model), "--slots", "2", "--json"])
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["target"]["gpu_layers"] == 0 and data["draft"]["gpu_layers"] == 0
    assert data["slots"] == 2 and data["ctx_size"] == 2048
    assert {"n_layer", "gpu_layers", "weights_bytes", "kv_bytes"} <= set(data["target"])
    assert any(d["kind"] == "cpu" and d["planned_bytes"] > 0 for d in data["devices"])
    table = runner.invoke(app, ["plan", str(tiny_model), "--gpu-memory", "8GiB"])
    assert table.exit_code == 0 and "planned GPU" in table.stdout and "on GPU" in table.stdout


def test_plan_refuses_bad_sizes_and_files(tmp_path: Path, tiny_model: Path):
    runner = CliRunner()
    assert runner.invoke(app, ["plan", str(tiny_model), "--gpu-memory", "lots"]).exit_code == 1
    assert runner.invoke(app, ["plan", str(tiny_model), "--kv-type", "q2"]).exit_code == 2
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 10)
    res = runner.invoke(app, ["plan", str(bad)])
    assert res.exit_code == 1 and "Traceback" not in res.stderr


def test_doctor_reports_the_cpu_build_and_how_to_fix_it(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: no traffic leaves
    runner = CliRunner()
    res = runner.invoke(app, ["doctor", "--json"])
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    assert "CPU" in data["backends"] and data["gpu_offload"] is False
    assert any(d["kind"] == "cpu" and d["free_bytes"] > 0 for d in data["devices"])
    assert data["hub_reachable"] is False
    assert any("GGML_CUDA=on" in p for p in data["problems"])
    assert any("Hub cannot be reached" in p for p in data["problems"])
    text = runner.invoke(app, ["doctor"])
    assert text.exit_code == 0 and "fix:" in text.stdout


def test_run_prints_its_plan_under_verbose(tiny_model: Path):
    res = CliRunner().invoke(app, ["run", str(tiny_model), "--raw", "hi", "-n", "2", "--verbose"])
    assert res.exit_code == 0, res.stderr
    assert "plan: context 2048 x 1 slot(s), KV f16" in res.stderr
    assert "target 0/2 layers on GPU" in res.stderr


def test_a_quantised_kv_cache_is_what_the_plan_says(smollm2: Path):
    info = read_info(smollm2)
    model = backend.Model(smollm2)
    try:
        for kv_type in ("q8_0", "q4_0"):
            ctx = backend.Context(model, n_ctx=2048, kv_type=kv_type)
            assert kv_bytes(info, 2048, kv_type) == pytest.approx(ctx.reported_kv_bytes, rel=0.10)
            ctx.close()
    finally:
        model.close()


def test_an_unsupported_quantised_kv_cache_is_one_sentence(tiny_model: Path):
    res = CliRunner().invoke(app, ["run", str(tiny_model), "--raw", "hi", "--kv-type", "q8_0"])
    assert res.exit_code == 1 and "use --kv-type f16" in res.stderr and "Traceback" not in res.stderr
