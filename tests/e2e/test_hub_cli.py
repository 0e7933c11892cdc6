"""pull / ls / rm / info / run with Hub names, as real processes against the stand-in Hub."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hubstandin import Repo, StandinHub

CLI = [sys.executable, "-m", "localspec"]


def interruptible() -> None:
    """Run in the child before exec: Ctrl-C back to its default, as in a terminal. A job a
    shell starts in the background (as a CI runner may) inherits SIGINT ignored, and
    Python then never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
SMOL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture
def standin(tiny_model: Path):
    hub = StandinHub(repos={"acme/Tiny-GGUF": Repo({"tiny-Q4_K_M.gguf": tiny_model, "tiny-F32.gguf": tiny_model})})
    hub.url = hub.start()
    yield hub
    hub.stop()


@pytest.fixture
def env(standin: StandinHub, tmp_path: Path) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "LOCALSPEC_"))}
    e.update(HF_ENDPOINT=standin.url, HF_HUB_CACHE=str(tmp_path / "hf-cache"),
             LOCALSPEC_CACHE_DIR=str(tmp_path / "ls-cache"), LOCALSPEC_CONFIG_DIR=str(tmp_path / "config"),
             LOCALSPEC_NO_COST_CACHE="1", PYTHONUNBUFFERED="1", NO_COLOR="1")
    return e


def cli(env: dict[str, str], *args: str, input: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args), env=env, input=input, capture_output=True, text=True, timeout=timeout)


def test_pull_then_run_offline_from_the_cache(env, standin: StandinHub, tiny_model: Path) -> None:
    pulled = cli(env, "pull", "acme/Tiny-GGUF")
    assert pulled.returncode == 0, pulled.stderr
    path = Path(pulled.stdout.strip())
    assert path.name == "tiny-Q4_K_M.gguf" and path.read_bytes() == tiny_model.read_bytes()
    assert "tiny-Q4_K_M.gguf" in pulled.stderr  # the progress bar's label
    standin.reset_counts()
    offline = {**env, "HF_HUB_OFFLINE": "1"}
    ran = cli(offline, "run", "acme/Tiny-GGUF", "--raw", "hello", "-n", "4", "--temperature", "0", "--json")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["usage"]["completion_tokens"] == 4
    missing = cli(offline, "run", "acme/Tiny-GGUF:F32", "--raw", "hello", "-n", "4")
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        "error: acme/Tiny-GGUF:F32 is not in the cache (it holds Q4_K_M); "
        "pull it while online: localspec pull acme/Tiny-GGUF:F32"
    )
    flag = cli({k: v for k, v in env.items() if k != "HF_HUB_OFFLINE"}, "run", "acme/Other-GGUF", "hi", "--offline")
    assert flag.returncode == 1 and "is not in the cache" in flag.stderr
    assert standin.requests == []  # offline: not one request reached the Hub


def test_ctrl_c_during_pull_then_pull_resumes(env, standin: StandinHub) -> None:
    big = b"GGUF" + bytes(range(256)) * (40 * 4096)
    standin.repos["acme/Big-GGUF"] = Repo({"big-Q4_K_M.gguf": big})
    standin.throttle = 12 << 20  # bytes per second
    proc = subprocess.Popen(CLI + ["pull", "acme/Big-GGUF"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=interruptible)
    blobs = Path(env["HF_HUB_CACHE"]) / "models--acme--Big-GGUF" / "blobs"
    deadline = time.time() + 30
    while time.time() < deadline:  # until huggingface_hub has written its first 10 MB chunk
        partial = list(blobs.glob("*.incomplete")) if blobs.is_dir() else []
        if partial and partial[0].stat().st_size >= 10 << 20:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert b"Traceback" not in err
    kept = list(blobs.glob("*.incomplete"))[0].stat().st_size
    assert 0 < kept < len(big)
    standin.throttle = 0
    standin.reset_counts()
    again = cli(env, "pull", "acme/Big-GGUF")
    assert again.returncode == 0, again.stderr
    assert Path(again.stdout.strip()).read_bytes() == big
    ranges = [r for m, p, r in standin.requests if m == "GET" and p.endswith("big-Q4_K_M.gguf")]
    assert ranges == [f"bytes={kept}-"]
    assert standin.bytes_served == len(big) - kept


def test_ls_info_and_rm(env, standin: StandinHub, tiny_model: Path) -> None:
    assert cli(env, "pull", "acme/Tiny-GGUF").returncode == 0
    assert cli(env, "pull", "acme/Tiny-GGUF:f32").returncode == 0
    listed = json.loads(cli(env, "ls", "--json").stdout)
    assert [(m["repo"], m["quant"], m["architecture"]) for m in listed] == [
        ("acme/Tiny-GGUF", "F32", "llama"), ("acme/Tiny-GGUF", "Q4_K_M", "llama")]
    assert all(m["size"] == tiny_model.stat().st_size and m["parameters"] > 0 for m in listed)
    info = json.loads(cli(env, "info", "acme/Tiny-GGUF", "--json").stdout)
    assert info["downloaded"] and info["architecture"] == "llama" and info["n_layer"] == 2
    # rm without --yes off a terminal refuses; with --yes removes one quant, then the repo
    refused = cli(env, "rm", "acme/Tiny-GGUF:F32")
    assert refused.returncode == 1 and "pass --yes" in refused.stderr
    assert cli(env, "rm", "acme/Tiny-GGUF:F32", "--yes").returncode == 0
    assert [m["quant"] for m in json.loads(cli(env, "ls", "--json").stdout)] == ["Q4_K_M"]
    assert cli(env, "rm", "acme/Tiny-GGUF", "--yes").returncode == 0
    assert json.loads(cli(env, "ls", "--json").stdout) == []
    assert not (Path(env["HF_HUB_CACHE"]) / "models--acme--Tiny-GGUF").exists()
    gone = cli(env, "rm", "acme/Tiny-GGUF", "--yes")
    assert gone.returncode == 1 and gone.stderr.startswith("error: acme/Tiny-GGUF is not in the Hugging Face cache")


@pytest.mark.smollm
def test_remote_info_reads_only_the_header(env, standin: StandinHub, smollm2: Path) -> None:
    standin.repos[SMOL] = Repo({SMOL_FILE: smollm2})
    got = cli(env, "info", SMOL, "--json")
    assert got.returncode == 0, got.stderr
    info = json.loads(got.stdout)
    assert (info["architecture"], info["quant"], info["vocab_size"], info["downloaded"]) == ("llama", "Q4_1", 49152, False)
    assert info["chat_template"] and info["n_layer"] == 30 and info["file_bytes"] == smollm2.stat().st_size
    assert standin.bytes_served <= smollm2.stat().st_size // 20  # a header, not the weights
    assert not (Path(env["HF_HUB_CACHE"]) / "models--HuggingFaceTB--SmolLM2-135M-Instruct-GGUF" / "blobs").exists() or \
        not any((Path(env["HF_HUB_CACHE"]) / "models--HuggingFaceTB--SmolLM2-135M-Instruct-GGUF" / "blobs").iterdir())


@pytest.mark.smollm
def test_smollm2_by_hub_name_from_a_prefilled_cache_offline(env, standin: StandinHub, smollm2: Path) -> None:
    """The issue's check: `localspec run HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:Q4_1 "hi"`
    with HF_HUB_OFFLINE=1 from a cache filled beforehand (here laid out as `hf download` does)."""
    cache = Path(env["HF_HUB_CACHE"]) / "models--HuggingFaceTB--SmolLM2-135M-Instruct-GGUF"
    sha = hashlib.sha256(smollm2.read_bytes()).hexdigest()
    commit = "b" * 40
    (cache / "blobs").mkdir(parents=True)
    (cache / "blobs" / sha).symlink_to(smollm2)
    (cache / "snapshots" / commit).mkdir(parents=True)
    (cache / "snapshots" / commit / SMOL_FILE).symlink_to(Path("../../blobs") / sha)
    (cache / "refs").mkdir()
    (cache / "refs" / "main").write_text(commit)
    ran = cli({**env, "HF_HUB_OFFLINE": "1"}, "run", f"{SMOL}:Q4_1", "hi", "-n", "8", "--json")
    assert ran.returncode == 0, ran.stderr
    record = json.loads(ran.stdout)
    assert record["usage"]["completion_tokens"] >= 1 and record["model"].endswith(SMOL_FILE)
    assert standin.requests == []


def test_hub_errors_are_one_line(env, standin: StandinHub) -> None:
    for args, message in [
        (("pull", "acme/Nope-GGUF"), "error: No model acme/Nope-GGUF on the Hub (if it is private, set HF_TOKEN or run `hf auth login`)."),
        (("pull", "acme/Tiny-GGUF:Q2_K"), "error: acme/Tiny-GGUF has no Q2_K file; available: Q4_K_M, F32."),
        (("run", "acme/../../etc/passwd", "hi"), "error: 'acme/../../etc/passwd' is not a valid Hub model name: it has an empty, '.' or '..' component."),
        (("info", "acme/Tiny-GGUF/x/../../y.gguf"), "error: 'acme/Tiny-GGUF/x/../../y.gguf' is not a valid Hub model name: it has an empty, '.' or '..' component."),
    ]:
        got = cli(env, *args)
        assert got.returncode == 1 and got.stderr.strip() == message, got.stderr
    down = {**env, "HF_ENDPOINT": "http://127.0.0.1:9"}
    got = cli(down, "pull", "acme/Tiny-GGUF")
    assert got.returncode == 1
    assert got.stderr.strip() == "error: Cannot reach the Hub at http://127.0.0.1:9 to find acme/Tiny-GGUF, and it is not in the cache."


def test_gated_repo_with_hf_token_or_a_stored_login(env, standin: StandinHub, tiny_model: Path, tmp_path: Path) -> None:
    standin.repos["acme/Gated-GGUF"] = Repo({"g-Q4_K_M.gguf": tiny_model}, gated=True)
    refused = cli(env, "pull", "acme/Gated-GGUF")
    assert refused.returncode == 1 and "is gated" in refused.stderr
    assert cli({**env, "HF_TOKEN": standin.token}, "info", "acme/Gated-GGUF", "--json").returncode == 0
    home = tmp_path / "hf-home"  # what `hf auth login` leaves behind
    home.mkdir()
    (home / "token").write_text(standin.token)
    pulled = cli({**env, "HF_HOME": str(home)}, "pull", "acme/Gated-GGUF")
    assert pulled.returncode == 0, pulled.stderr


def test_export_reads_the_original_weights_from_a_remote_header(env, standin: StandinHub, tmp_path: Path) -> None:
    """A Hub GGUF whose header names its source repo: exported as that repo, from the
    header alone (nothing downloaded); a local GGUF without one, as the file itself."""
    from tinymodels import TinySpec, write_tiny_model

    tagged = write_tiny_model(tmp_path / "tagged.gguf", TinySpec(source_url="https://huggingface.co/acme/Tiny-Instruct"))
    standin.repos["acme/Tagged-GGUF"] = Repo({"tagged-Q8_0.gguf": tagged})
    got = cli(env, "export", "vllm", "acme/Tagged-GGUF", "--draft", "acme/Tagged-GGUF", "--json")
    assert got.returncode == 0, got.stderr
    record = json.loads(got.stdout)
    assert record["argv"][:3] == ["vllm", "serve", "acme/Tiny-Instruct"]
    assert json.loads(record["argv"][record["argv"].index("--speculative-config") + 1])["model"] == "acme/Tiny-Instruct"
    assert record["argv"][record["argv"].index("--served-model-name") + 1] == "acme/Tagged-GGUF"
    assert not list(Path(env["HF_HUB_CACHE"]).rglob("*.gguf"))  # read remotely, nothing downloaded

    script = tmp_path / "serve-sglang.sh"
    got = cli(env, "export", "sglang", str(tagged.with_name("plain.gguf")), "-o", str(script))
    assert got.returncode == 1 and got.stderr.count("\n") == 1 and "plain.gguf" in got.stderr  # no such file
    plain = write_tiny_model(tmp_path / "plain.gguf")
    got = cli(env, "export", "sglang", str(plain), "--slots", "16", "-o", str(script))
    assert got.returncode == 0 and got.stdout == "", got.stderr
    text = script.read_text()
    assert os.access(script, os.X_OK) and f"--model-path {plain}" in text and "--max-running-requests 16" in text
    assert "no original-weights repo is known" in text
    assert subprocess.run(["sh", "-n", str(script)]).returncode == 0


def test_export_refuses_bad_input_in_one_sentence(env, standin: StandinHub, tiny_model: Path) -> None:
    for args, code, says in (
        (["export", "tgi", str(tiny_model)], 2, "must be one of vllm, sglang"),
        (["export", "vllm", str(tiny_model), "--source", "not a repo"], 2, "must be a Hub repository"),
        (["export", "vllm", str(tiny_model), "--spec", "draft"], 1, "needs a draft model"),
        (["export", "vllm", "acme/Nowhere-GGUF"], 1, "--source ORG/REPO"),
    ):
        got = cli(env, *args)
        assert got.returncode == code and says in got.stderr and "Traceback" not in got.stderr, (args, got.stderr)
    got = cli(env, "export", "vllm", "acme/Nowhere-GGUF", "--source", "acme/Nowhere")  # no header read at all
    assert got.returncode == 0 and "vllm serve acme/Nowhere" in got.stdout, got.stderr
