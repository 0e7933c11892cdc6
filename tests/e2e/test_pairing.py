"""Draft pairing against the stand-in Hub: candidates by family and size, tokenizer checks
from remote headers (nothing downloaded), the profile's draft first, --draft auto."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hubstandin import Repo, StandinHub
from localspec.resolve.hub import Hub
from localspec.resolve.pairing import auto_draft, candidates, size_label, smaller_of_family

CLI = [sys.executable, "-m", "localspec"]


def test_size_labels_and_families() -> None:
    assert size_label("Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF") == ("qwen2.5-coder-{}-instruct", 1.5e9)
    assert size_label("unsloth/gemma-3-270m-it-GGUF") == ("gemma-3-{}-it", 270e6)
    assert size_label("bartowski/Meta-Llama-3.1-8B-Instruct-GGUF") == ("meta-llama-3.1-{}-instruct", 8e9)
    assert size_label("acme/no-size-here") is None
    repos = ["Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF", "Qwen/Qwen2.5-Coder-3B-Instruct-GGUF",
             "Qwen/Qwen2.5-Coder-14B-Instruct-GGUF", "Qwen/Qwen2.5-0.5B-Instruct-GGUF", "Qwen/Qwen2.5-Coder-1.5B-GGUF"]
    assert smaller_of_family("Qwen/Qwen2.5-Coder-7B-Instruct-GGUF", repos) == [
        "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF", "Qwen/Qwen2.5-Coder-3B-Instruct-GGUF"]


@pytest.fixture
def standin(tiny_model: Path, tiny_draft: Path, tiny_other_vocab: Path):
    hub = StandinHub(repos={
        "acme/Tiny-1B-Instruct-GGUF": Repo({"tiny-1b-Q4_K_M.gguf": tiny_model}),
        "acme/Tiny-2B-Instruct-GGUF": Repo({"tiny-2b-Q4_K_M.gguf": tiny_model}),  # larger: never a draft
        "acme/Tiny-50M-Instruct-GGUF": Repo({"tiny-50m-Q4_K_M.gguf": tiny_other_vocab}),  # another vocabulary
        "acme/Tiny-100M-Instruct-GGUF": Repo({"tiny-100m-Q4_K_M.gguf": tiny_draft}),
        "bartowski/Tiny-300M-Instruct-GGUF": Repo({"Tiny-300M-Instruct-Q4_K_M.gguf": tiny_draft}),
        "stranger/Tiny-10M-Instruct-GGUF": Repo({"t-Q4_K_M.gguf": tiny_draft}),  # neither the org nor a publisher
    })
    hub.url = hub.start()
    yield hub
    hub.stop()


@pytest.fixture
def hub(standin: StandinHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Hub:
    monkeypatch.setenv("LOCALSPEC_CACHE_DIR", str(tmp_path / "ls-cache"))
    monkeypatch.setenv("LOCALSPEC_CONFIG_DIR", str(tmp_path / "config"))
    return Hub(endpoint=standin.url, cache_dir=tmp_path / "hf-cache")


def test_candidates_are_checked_from_headers_without_downloading(hub: Hub, standin: StandinHub) -> None:
    _, found = candidates(hub, "acme/Tiny-1B-Instruct-GGUF")
    assert [(c.name, c.source, c.compatible) for c in found] == [
        ("acme/Tiny-50M-Instruct-GGUF", "hub", False),
        ("acme/Tiny-100M-Instruct-GGUF", "hub", True),
        ("bartowski/Tiny-300M-Instruct-GGUF", "hub", True),
    ]
    assert found[0].why == "the token texts differ"
    assert all(m == "GET" and (r or "").startswith("bytes=") or "/api/" in p for m, p, r in standin.requests if "/resolve/" in p)
    assert not (hub.cache_dir / "models--acme--Tiny-100M-Instruct-GGUF").exists()


def test_auto_draft_is_the_first_compatible_and_is_remembered(hub: Hub, standin: StandinHub) -> None:
    assert auto_draft(hub, "acme/Tiny-1B-Instruct-GGUF") == "acme/Tiny-100M-Instruct-GGUF"
    standin.reset_counts()
    assert auto_draft(hub, "acme/Tiny-1B-Instruct-GGUF") == "acme/Tiny-100M-Instruct-GGUF"
    assert [p for _, p, _ in standin.requests] == ["/api/models/acme/Tiny-1B-Instruct-GGUF"]  # no search, no headers


def test_a_profile_s_draft_comes_first(hub: Hub, tmp_path: Path) -> None:
    profiles = tmp_path / "config" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "tiny.yaml").write_text("model: acme/Tiny-1B-Instruct-GGUF\ndraft: bartowski/Tiny-300M-Instruct-GGUF\n")
    _, found = candidates(hub, "acme/Tiny-1B-Instruct-GGUF")
    assert (found[0].name, found[0].source, found[0].compatible) == ("bartowski/Tiny-300M-Instruct-GGUF", "profile", True)


def test_pair_command_and_run_with_draft_auto(standin: StandinHub, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "LOCALSPEC_"))}
    env.update(HF_ENDPOINT=standin.url, HF_HUB_CACHE=str(tmp_path / "hf"), LOCALSPEC_CACHE_DIR=str(tmp_path / "ls"),
               LOCALSPEC_CONFIG_DIR=str(tmp_path / "cfg"), LOCALSPEC_NO_COST_CACHE="1")
    got = subprocess.run(CLI + ["pair", "acme/Tiny-1B-Instruct-GGUF", "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    listed = json.loads(got.stdout)["candidates"]
    assert [c["compatible"] for c in listed] == [False, True, True]
    ran = subprocess.run(
        CLI + ["run", "acme/Tiny-1B-Instruct-GGUF", "--draft", "auto", "--spec", "draft", "--draft-max", "4",
               "--raw", "hello", "-n", "12", "--temperature", "0", "--json", "--verbose"],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    assert "--draft auto: acme/Tiny-100M-Instruct-GGUF" in ran.stderr
    assert json.loads(ran.stdout)["usage"]["completion_tokens"] == 12
    # the draft was fetched to be loaded (whether it then pays is the speculation policy's call)
    assert list((tmp_path / "hf" / "models--acme--Tiny-100M-Instruct-GGUF" / "snapshots").rglob("*.gguf"))
