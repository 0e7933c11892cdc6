"""``localspec run`` driven through Typer's CliRunner and as a real subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from localspec.cli import app

runner = CliRunner()


def run(*args: str, input: str | None = None):
    return runner.invoke(app, ["run", *args], input=input)


def test_greedy_raw_run_gives_the_same_text_twice(tiny_model: Path):
    args = (str(tiny_model), "--raw", "hi", "--temperature", "0", "--max-tokens", "8")
    first, second = run(*args), run(*args)
    assert first.exit_code == 0, first.stderr
    assert first.stdout == second.stdout
    assert first.stdout.strip()


def test_a_seed_reproduces_sampled_text(tiny_model: Path):
    args = (str(tiny_model), "--raw", "hi", "--seed", "1", "--temperature", "0.8", "-n", "16")
    assert run(*args).stdout == run(*args).stdout
    other = run(str(tiny_model), "--raw", "hi", "--seed", "2", "--temperature", "0.8", "-n", "16")
    assert other.stdout != run(*args).stdout


def test_json_output_has_the_names_scripts_rely_on(tiny_model: Path):
    res = run(str(tiny_model), "--raw", "hi", "--temperature", "0", "-n", "5", "--json")
    assert res.exit_code == 0
    record = json.loads(res.stdout)
    assert set(record) >= {"text", "finish_reason", "usage", "timings"}
    assert record["finish_reason"] == "length"
    assert record["usage"]["completion_tokens"] == 5
    assert record["usage"]["prompt_tokens"] > 0
    assert set(record["timings"]) >= {"load_s", "prompt_s", "decode_s", "decode_tokens_per_s"}
    assert record["timings"]["decode_tokens_per_s"] > 0


def test_stats_go_to_stderr_and_only_the_answer_to_stdout(tiny_model: Path):
    res = run(str(tiny_model), "--raw", "hi", "--temperature", "0", "-n", "5", "--stats")
    assert res.exit_code == 0
    assert "tok/s" in res.stderr and "tok/s" not in res.stdout


def test_stop_option_cuts_the_answer(tiny_model: Path):
    full = run(str(tiny_model), "--raw", "hi", "--temperature", "0", "-n", "30").stdout
    stop = full[6:9]
    cut = run(str(tiny_model), "--raw", "hi", "--temperature", "0", "-n", "30", "--stop", stop)
    assert cut.stdout.rstrip("\n") == full[: full.index(stop)].rstrip("\n")


def test_prompt_from_file_and_stdin_are_joined(tiny_model: Path, tmp_path: Path):
    prompt_file = tmp_path / "p.txt"
    prompt_file.write_text("from the file")
    res = run(str(tiny_model), "--raw", "head", "-f", str(prompt_file), "-n", "1", "--json", input="from stdin")
    assert res.exit_code == 0
    from localspec.engine import backend

    m = backend.Model(tiny_model)
    expected = len(m.tokenize("from the file\nfrom stdin\nhead", add_special=True, parse_special=True))
    assert json.loads(res.stdout)["usage"]["prompt_tokens"] == expected


def one_clean_error(res) -> str:
    assert res.exit_code == 1, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    assert res.stdout == ""
    return lines[0]


def test_a_missing_model_file(tmp_path: Path):
    assert "No model file" in one_clean_error(run(str(tmp_path / "none.gguf"), "hi"))


def test_a_file_that_is_not_gguf(tmp_path: Path):
    bad = tmp_path / "bad.gguf"
    bad.write_text("this is not a model")
    assert "not a GGUF" in one_clean_error(run(str(bad), "hi"))


def test_a_truncated_gguf(tiny_model: Path, tmp_path: Path):
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(tiny_model.read_bytes()[:5000])
    line = one_clean_error(run(str(bad), "hi"))
    assert "truncated or damaged" in line or "could not load" in line


def test_an_empty_prompt(tiny_model: Path):
    assert "empty" in one_clean_error(run(str(tiny_model), "--raw", input=""))


def test_a_prompt_longer_than_the_context(tiny_model: Path):
    line = one_clean_error(run(str(tiny_model), "--raw", "x" * 200, "--ctx-size", "64"))
    assert "context holds 64" in line


def test_usage_errors_exit_2(tiny_model: Path):
    assert run(str(tiny_model), "--no-such-flag").exit_code == 2
    assert run(str(tiny_model), "--raw", "--system", "s", "hi").exit_code == 2


# ---------------------------------------------------------------- real processes

CLI = [sys.executable, "-m", "localspec"]


def interruptible() -> None:
    """Run in the child before exec: Ctrl-C back to its default, as in a terminal. A job a
    shell starts in the background (as a CI runner may) inherits SIGINT ignored, and
    Python then never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_pipe_on_stdin_as_a_real_process(tiny_model: Path):
    proc = subprocess.run(
        CLI + ["run", str(tiny_model), "--raw", "--temperature", "0", "-n", "6", "--json"],
        input="hello from a pipe",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["usage"]["completion_tokens"] == 6


@pytest.mark.smollm
def test_echo_a_question_into_run_answers_with_the_default_model(smollm2: Path):
    from localspec.resolve.local import embedded_model

    model = [] if embedded_model() else [str(smollm2)]
    proc = subprocess.run(
        CLI + ["run", *model, "--temperature", "0", "--max-tokens", "60"],
        input="Name three colours.",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    answer = proc.stdout.lower()
    assert sum(c in answer for c in ("red", "blue", "green", "yellow")) >= 2, answer
    assert proc.stderr == ""


@pytest.mark.smollm
def test_ctrl_c_stops_cleanly_keeps_the_text_and_exits_130(smollm2: Path):
    proc = subprocess.Popen(
        CLI + ["run", str(smollm2), "--raw", "Once upon a time", "--temperature", "1.5", "--seed", "3",
               "--top-k", "0", "--top-p", "1", "--min-p", "0", "--ctx-size", "4096"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=interruptible,
    )
    first = proc.stdout.read(20)  # generation has begun
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert len(first + out) > 20
    assert b"Traceback" not in err
