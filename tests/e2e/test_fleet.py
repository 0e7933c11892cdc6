"""``localspec serve`` as a local model server: two real models (SmolLM2-135M and
Qwen2.5-Coder-0.5B) in one subprocess, loaded on demand, driven with the official
``openai`` SDK; a memory budget that holds one of them; keep-alive; ``localspec ps``;
a corrupt GGUF and an unknown name failing alone; the whole HF cache served by name."""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from .test_serve import Server

pytestmark = pytest.mark.smollm

CLI = [sys.executable, "-m", "localspec"]
N = 24
ASK = {"smol": "Name three colours. Answer in one line.", "qwen": "Write a Python function that adds two numbers."}
QWEN_REPO = "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An empty Hugging Face cache (no draft is found for either model), offline, and a
    config dir of the test's own."""
    root = tmp_path_factory.mktemp("fleet-env")
    return {**os.environ, "HF_HUB_CACHE": str(root / "hf"), "HF_HUB_OFFLINE": "1",
            "LOCALSPEC_CONFIG_DIR": str(root / "config"), "LOCALSPEC_NO_COST_CACHE": "1"}


@pytest.fixture(scope="module")
def files(smollm2: Path, qwen_05b: Path) -> dict[str, Path]:
    return {"smol": smollm2, "qwen": qwen_05b}


def run_answer(model: str | Path, prompt: str, env: dict[str, str]) -> str:
    """What ``localspec run`` prints for the prompt, greedy."""
    got = subprocess.run(CLI + ["run", str(model), "--temperature", "0", "--max-tokens", str(N), "--ctx-size", "512",
                                prompt], env=env, capture_output=True, text=True, timeout=180)
    assert got.returncode == 0, got.stderr
    return got.stdout.strip()


@pytest.fixture(scope="module")
def expected(files: dict[str, Path], env: dict[str, str]) -> dict[str, str]:
    return {name: run_answer(path, ASK[name], env) for name, path in files.items()}


def ask(client: openai.OpenAI, model: str, prompt: str, **kw) -> str:
    out = client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}],
                                         temperature=0, max_tokens=N, **kw)
    assert out.model  # the id /v1/models gives it, whichever name the request used
    return (out.choices[0].message.content or "").strip()


def loaded(srv: Server, env: dict[str, str]) -> list[str]:
    """The models ``localspec ps --json`` shows loaded."""
    got = subprocess.run(CLI + ["ps", "--url", srv.url, "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    return sorted(m["id"] for m in json.loads(got.stdout))


def wait_until(check, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return check()


def plans(files: dict[str, Path]) -> dict[str, int]:
    """The bytes the server plans for each model (as `plan` prints), for the budget."""
    from localspec.loader import plan_for
    from localspec.plan import Device

    big = [Device("cpu", "cpu", 1 << 40, 1 << 40)]
    return {name: sum(d.planned_bytes for d in plan_for(path, None, ctx_size=512, slots=2, kv_type="f16",
                                                        devices=big).devices) for name, path in files.items()}


@pytest.fixture(scope="module")
def pair(files: dict[str, Path], env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Both models and a truncated GGUF, nothing loaded at start."""
    broken = tmp_path_factory.mktemp("broken") / "broken.gguf"
    with open(files["smol"], "rb") as f:
        broken.write_bytes(f.read(files["smol"].stat().st_size // 3))
    srv = Server([files["smol"], files["qwen"], broken], "--slots", "2", "--ctx-size", "512", "--keep-alive", "-1",
                 env=env)
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def names(files: dict[str, Path]) -> dict[str, str]:
    return {k: p.name.removesuffix(".gguf") for k, p in files.items()}


def test_two_models_answer_as_run_does_in_turn_and_together(pair: Server, files, expected, env) -> None:
    model = names(files)
    assert loaded(pair, env) == []
    listed = {m.id for m in pair.client().models.list().data}
    assert {model["smol"], model["qwen"], "broken"} <= listed
    client = pair.client()
    for name in ("smol", "qwen"):
        assert ask(client, model[name], ASK[name]) == expected[name]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        jobs = {pool.submit(ask, client, model[name], ASK[name]): name for name in ("smol", "qwen", "qwen", "smol")}
        for job, name in jobs.items():
            assert job.result(timeout=180) == expected[name]
    assert loaded(pair, env) == sorted(model.values())
    card = client.models.retrieve(model["qwen"]).model_dump()
    assert card["loaded"] and card["context_length"] == 512 and card["slots"] == 2 and card["draft"] is None


def test_keep_alive_zero_unloads_after_the_answer(pair: Server, files, expected, env) -> None:
    model = names(files)
    client = pair.client()
    assert ask(client, model["smol"], ASK["smol"]) == expected["smol"]
    assert model["smol"] in loaded(pair, env)
    assert ask(client, model["smol"], ASK["smol"], extra_body={"keep_alive": 0}) == expected["smol"]
    assert wait_until(lambda: model["smol"] not in loaded(pair, env))
    with pytest.raises(openai.BadRequestError) as bad:
        ask(client, model["smol"], ASK["smol"], extra_body={"keep_alive": "soon"})
    assert bad.value.body["param"] == "keep_alive"
    assert ask(client, model["smol"], ASK["smol"]) == expected["smol"]  # loaded again


def test_an_unknown_model_and_a_corrupt_gguf_fail_alone(pair: Server, files, expected) -> None:
    model = names(files)
    client = pair.client()
    with pytest.raises(openai.NotFoundError) as unknown:
        ask(client, "no-such-model", "hi")
    assert unknown.value.body["param"] == "model" and unknown.value.body["code"] == "model_not_found"
    for _ in range(2):  # the second time from what the first load found
        with pytest.raises(openai.APIStatusError) as corrupt:
            ask(client, "broken", "hi")
        assert corrupt.value.status_code == 503 and corrupt.value.body["param"] == "model"
        assert "broken.gguf" in corrupt.value.body["message"]
        assert ask(client, model["qwen"], ASK["qwen"]) == expected["qwen"]


def test_a_budget_for_one_unloads_the_idle_model_and_never_cuts_a_stream(files, expected, env) -> None:
    need = plans(files)
    budget = max(need.values()) + min(need.values()) // 2  # either alone, not both
    model = names(files)
    srv = Server([files["smol"], files["qwen"]], "--slots", "2", "--ctx-size", "512", "--max-memory", str(budget),
                 env=env)
    try:
        srv.wait_ready()
        client = srv.client()
        assert ask(client, model["smol"], ASK["smol"]) == expected["smol"]
        assert ask(client, model["qwen"], ASK["qwen"]) == expected["qwen"]
        assert loaded(srv, env) == [model["qwen"]]
        # while qwen streams, smol cannot be loaded: 503 with Retry-After; the stream ends whole
        stream = client.chat.completions.create(model=model["qwen"], messages=[{"role": "user", "content": ASK["qwen"]}],
                                                temperature=0, max_tokens=N, stream=True)
        chunks = iter(stream)
        text = [next(chunks).choices[0].delta.content or ""]
        with pytest.raises(openai.APIStatusError) as busy:
            ask(srv.client(), model["smol"], ASK["smol"])
        assert busy.value.status_code == 503 and busy.value.response.headers.get("retry-after")
        finish = None
        for chunk in chunks:
            if chunk.choices:
                text.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
        assert finish is not None and "".join(text).strip() == expected["qwen"]
        assert ask(client, model["smol"], ASK["smol"]) == expected["smol"]
        assert loaded(srv, env) == [model["smol"]]
    finally:
        srv.stop()
    log = srv.proc.stderr.read()
    assert f"unloaded {model['qwen']} (to make room for {model['smol']})" in log


def test_sigterm_drains_the_streams_of_every_model(files, env) -> None:
    model = names(files)
    srv = Server([files["smol"], files["qwen"]], "--slots", "1", "--ctx-size", "512", env=env)
    try:
        srv.wait_ready()
        streams = [srv.client().chat.completions.create(
            model=model[name], messages=[{"role": "user", "content": ASK[name]}], temperature=0, max_tokens=N,
            stream=True) for name in ("smol", "qwen")]
        firsts = [next(iter(s)) for s in streams]
        assert all(f.choices[0].delta.role == "assistant" for f in firsts)
        srv.proc.send_signal(15)
        for s in streams:
            finishes = [ch.choices[0].finish_reason for ch in s if ch.choices]
            assert finishes and finishes[-1] is not None
        assert srv.proc.wait(timeout=30) == 0
    finally:
        srv.stop()


def _cache(root: Path, repo: str, path: Path, commit: str) -> None:
    """``path`` laid out in a Hugging Face cache as ``hf download`` leaves it."""
    top = root / ("models--" + repo.replace("/", "--"))
    (top / "blobs").mkdir(parents=True)
    (top / "blobs" / (commit[:8] * 8)).symlink_to(path)
    (top / "snapshots" / commit).mkdir(parents=True)
    (top / "snapshots" / commit / path.name).symlink_to(Path("../../blobs") / (commit[:8] * 8))
    (top / "refs").mkdir()
    (top / "refs" / "main").write_text(commit)


def test_with_no_model_the_cache_and_the_profiles_are_served_by_name(files, tmp_path: Path) -> None:
    """``serve`` alone: every cached GGUF by its Hub name (or file name) and every profile
    whose model is here; a Hub name not cached is a 404 that says how to get it; two
    first requests at once load the model once."""
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1",
           "LOCALSPEC_CONFIG_DIR": str(tmp_path / "config"), "LOCALSPEC_NO_COST_CACHE": "1"}
    _cache(tmp_path / "hf", QWEN_REPO, files["qwen"], "c" * 40)
    (tmp_path / "config" / "profiles").mkdir(parents=True)
    (tmp_path / "config" / "profiles" / "smol.yaml").write_text(
        f"description: SmolLM2 from a file\nmodel: {files['smol']}\nsampling:\n  temperature: 0\n")
    srv = Server(None, "--ctx-size", "512", "--slots", "2", env=env)
    try:
        srv.wait_ready()
        client = srv.client()
        listed = {m.id for m in client.models.list().data}
        assert {"smol", f"{QWEN_REPO}:Q4_K_M"} <= listed
        assert not any("1.5B" in m or "7B" in m for m in listed)  # shipped profiles whose model is not here
        want = run_answer(f"{QWEN_REPO}:Q4_K_M", ASK["qwen"], env)
        for name in (f"{QWEN_REPO}:Q4_K_M", QWEN_REPO, files["qwen"].name):
            assert ask(client, name, ASK["qwen"]) == want
        with pytest.raises(openai.NotFoundError) as missing:
            ask(client, "acme/Missing-GGUF", "hi")
        assert missing.value.body["param"] == "model" and "localspec pull acme/Missing-GGUF" in missing.value.body["message"]
        smol = run_answer(files["smol"], ASK["smol"], env)
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda _: ask(client, "smol", ASK["smol"]), range(2)))
        assert answers == [smol, smol]
        # a model removed from the cache while listed: a 404 on its next load
        assert ask(client, QWEN_REPO, ASK["qwen"], extra_body={"keep_alive": 0}) == want
        assert wait_until(lambda: f"{QWEN_REPO}:Q4_K_M" not in loaded(srv, env))
        shutil.rmtree(tmp_path / "hf" / ("models--" + QWEN_REPO.replace("/", "--")))
        with pytest.raises(openai.NotFoundError) as gone:
            ask(client, files["qwen"].name, "hi")
        assert gone.value.body["param"] == "model"
        assert ask(client, "smol", ASK["smol"]) == smol
    finally:
        srv.stop()
    log = srv.proc.stderr.read()
    assert log.count("loading smol") == 1, log
