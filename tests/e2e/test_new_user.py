"""What a new user hits first, as a real process: the defaults, odd seeds, odd bytes, and
a --help that does not wait for llama.cpp to load."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "localspec"]
COPY = "def area(w, h):\n    return w * h\n\n" * 6


def localspec(*args: str, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args), input=input or b"", capture_output=True, timeout=timeout)


def test_speculation_is_on_with_no_flags(tiny_model: Path, tmp_path: Path):
    """The README promises speculation on by default: with no --spec, a request runs with
    n-gram speculation (it took steps under the policy), not with speculation off."""
    edit = tmp_path / "edit.txt"
    edit.write_text(COPY)
    got = localspec("run", str(tiny_model), "-f", str(edit), "--raw", "-n", "40", "--temperature", "0", "--json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["spec_stats"]["steps"] > 0
    stats = localspec("run", str(tiny_model), "-f", str(edit), "--raw", "-n", "40", "--temperature", "0", "--stats")
    assert "speculation: off\n" not in stats.stderr.decode()


def test_a_negative_seed_answers_instead_of_hanging(tiny_model: Path):
    got = localspec("run", str(tiny_model), "hi", "--seed", "-5", "-n", "8", "--json", timeout=60)
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["usage"]["completion_tokens"] == 8
    again = localspec("run", str(tiny_model), "hi", "--seed", "-5", "-n", "8", "--json", timeout=60)
    assert json.loads(again.stdout)["text"] == json.loads(got.stdout)["text"]


def test_bytes_that_are_not_utf8_on_stdin_are_replaced_and_said(tiny_model: Path):
    got = localspec("run", str(tiny_model), "--raw", "-n", "4", "--temperature", "0", "--json",
                    input=b"caf\xe9 \xff\xfe and more \x80")
    assert got.returncode == 0, got.stderr
    err = got.stderr.decode()
    assert "stdin is not valid UTF-8" in err and "internal error" not in err and "Traceback" not in err
    assert json.loads(got.stdout)["usage"]["completion_tokens"] == 4


def test_help_loads_no_llama_cpp():
    got = subprocess.run([sys.executable, "-X", "importtime", "-m", "localspec", "--help"],
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 0 and "Usage" in got.stdout
    modules = [line.rsplit("|", 1)[-1].strip() for line in got.stderr.splitlines() if line.startswith("import time:")]
    assert modules and not [m for m in modules if m.startswith("llama_cpp")]
    assert "localspec.engine" not in [m.split(".")[0] + "." + m.split(".")[1] if "." in m else m for m in modules]


def test_a_bad_layer_count_is_a_usage_error_naming_the_flag(tiny_model: Path):
    got = localspec("run", str(tiny_model), "hi", "--gpu-layers", "-1")
    err = " ".join(got.stderr.decode().replace("│", " ").split())  # unwrapped from Typer's box
    assert got.returncode == 2 and "--gpu-layers" in err and "must be 'auto' or 'all', or an integer of at least 0" in err
    assert "internal error" not in err
