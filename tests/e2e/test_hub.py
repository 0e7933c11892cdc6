"""Hub resolution and downloads against the loopback stand-in (tests/hubstandin.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from hubstandin import Repo, StandinHub
from localspec.errors import HubError, HubUnreachable, NotInCache
from localspec.resolve.hub import Hub
from localspec.resolve.names import parse_hub


@pytest.fixture
def standin(tiny_model: Path, tiny_draft: Path, tiny_split: list[Path]):
    hub = StandinHub(
        repos={
            "acme/Tiny-GGUF": Repo({
                "tiny-Q8_0.gguf": tiny_draft,
                "tiny-Q4_K_M.gguf": tiny_model,
                "README.md": b"# tiny\n",
            }),
            "acme/Tiny-Split-GGUF": Repo({p.name: p for p in tiny_split}),
            "acme/Tiny-Safetensors": Repo({"model.safetensors": b"\0" * 64, "config.json": b"{}"}),
            "acme/Tiny-Gated-GGUF": Repo({"tiny-Q4_K_M.gguf": tiny_model}, gated=True),
        }
    )
    hub.url = hub.start()
    yield hub
    hub.stop()


@pytest.fixture
def hub(standin: StandinHub, tmp_path: Path) -> Hub:
    return Hub(endpoint=standin.url, cache_dir=tmp_path / "hf-cache", token=None)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_default_quant_lands_in_the_standard_cache_layout(hub: Hub, standin: StandinHub, tiny_model: Path) -> None:
    got = hub.resolve(parse_hub("acme/Tiny-GGUF"))
    assert got.quant == "Q4_K_M" and got.downloaded
    commit = standin.repos["acme/Tiny-GGUF"].commit
    root = hub.cache_dir / "models--acme--Tiny-GGUF"
    assert got.path == root / "snapshots" / commit / "tiny-Q4_K_M.gguf"
    assert got.path.is_symlink() and got.path.resolve().parent == root / "blobs"
    assert (root / "refs" / "main").read_text() == commit
    assert _sha(got.path) == _sha(tiny_model)
    # a second resolve is one metadata request, no download
    standin.reset_counts()
    again = hub.resolve(parse_hub("acme/Tiny-GGUF"))
    assert again.path == got.path and not again.downloaded
    assert [r[0] for r in standin.requests] == ["GET"] and standin.bytes_served == 0


def test_quant_tag_file_and_revision(hub: Hub, standin: StandinHub, tiny_draft: Path) -> None:
    assert _sha(hub.resolve(parse_hub("acme/Tiny-GGUF:q8_0")).path) == _sha(tiny_draft)
    assert hub.resolve(parse_hub("acme/Tiny-GGUF/tiny-Q8_0.gguf")).quant == "Q8_0"
    commit = standin.repos["acme/Tiny-GGUF"].commit
    assert hub.resolve(parse_hub(f"acme/Tiny-GGUF@{commit}:Q8_0")).commit == commit
    with pytest.raises(HubError, match="has no revision 'v9'"):
        hub.resolve(parse_hub("acme/Tiny-GGUF@v9"))
    with pytest.raises(HubError) as err:
        hub.resolve(parse_hub("acme/Tiny-GGUF:Q2_K"))
    assert str(err.value) == "acme/Tiny-GGUF has no Q2_K file; available: Q4_K_M, Q8_0."


def test_split_model_downloads_every_part_and_loads_the_first(hub: Hub, tiny_split: list[Path]) -> None:
    got = hub.resolve(parse_hub("acme/Tiny-Split-GGUF"))
    assert [p.name for p in got.paths] == [p.name for p in tiny_split]
    assert got.path.name.endswith("-00001-of-00002.gguf")
    assert all(p.is_file() for p in got.paths)


def test_split_model_runs(hub: Hub, tiny_split: list[Path], tiny_model: Path) -> None:
    """llama.cpp finds the other parts beside the first one in the snapshot."""
    from localspec.engine import Engine, EngineConfig
    from localspec.types import Request, SamplingParams

    def greedy(path: Path) -> list[int]:
        engine = Engine(path, EngineConfig(n_ctx=256))
        try:
            stream = engine.submit(Request(prompt="hello", sampling=SamplingParams(temperature=0), max_tokens=8, spec="off"))
            return [e.token_id for e in stream]
        finally:
            engine.close()

    assert greedy(hub.resolve(parse_hub("acme/Tiny-Split-GGUF")).path) == greedy(tiny_model)


@pytest.mark.parametrize(
    "name, message",
    [
        ("acme/Tiny-Safetensors", "acme/Tiny-Safetensors has no GGUF model files; localspec runs GGUF models only."),
        ("acme/Nothing-Here", "No model acme/Nothing-Here on the Hub (if it is private, set HF_TOKEN or run `hf auth login`)."),
        ("acme/Tiny-Gated-GGUF", "acme/Tiny-Gated-GGUF is gated: accept its conditions on the Hub, then set HF_TOKEN or run `hf auth login`."),
        ("acme/Tiny-GGUF/missing.gguf", "acme/Tiny-GGUF has no file missing.gguf; its GGUF files: tiny-Q4_K_M.gguf, tiny-Q8_0.gguf."),
    ],
)
def test_hub_refusals_are_one_sentence(hub: Hub, name: str, message: str) -> None:
    with pytest.raises(HubError) as err:
        hub.resolve(parse_hub(name))
    assert str(err.value) == message


def test_gated_repo_with_a_token(hub: Hub, standin: StandinHub) -> None:
    hub.token = standin.token
    assert hub.resolve(parse_hub("acme/Tiny-Gated-GGUF")).path.is_file()


def test_dropped_connection_resumes_where_it_stopped(hub: Hub, standin: StandinHub) -> None:
    big = b"GGUF" + bytes(range(256)) * (24 * 4096)
    standin.repos["acme/Big-GGUF"] = Repo({"big-Q4_K_M.gguf": big})
    standin.drop_after["big-Q4_K_M.gguf"] = 15 << 20
    got = hub.resolve(parse_hub("acme/Big-GGUF"))
    assert got.path.read_bytes() == big
    ranges = [r for m, p, r in standin.requests if m == "GET" and p.endswith("big-Q4_K_M.gguf")]
    assert ranges == [None, f"bytes={15 << 20}-"]
    assert standin.bytes_served == len(big)  # nothing came twice


def test_checksum_mismatch_is_refused_and_not_kept(hub: Hub, standin: StandinHub) -> None:
    standin.corrupt.add("tiny-Q4_K_M.gguf")
    with pytest.raises(HubError, match=r"does not match its published sha256 .* the file was deleted"):
        hub.resolve(parse_hub("acme/Tiny-GGUF"))
    root = hub.cache_dir / "models--acme--Tiny-GGUF"
    assert not list((root / "blobs").iterdir())
    assert not any(p.is_file() for p in (root / "snapshots").rglob("*.gguf"))
    standin.corrupt.clear()
    assert hub.resolve(parse_hub("acme/Tiny-GGUF")).downloaded  # a clean pull afterwards


def test_offline_uses_the_cache_without_a_request(hub: Hub, standin: StandinHub) -> None:
    online = hub.resolve(parse_hub("acme/Tiny-GGUF:Q8_0"))
    standin.reset_counts()
    offline = Hub(endpoint=hub.endpoint, cache_dir=hub.cache_dir, offline=True)
    assert offline.resolve(parse_hub("acme/Tiny-GGUF:Q8_0")).path == online.path
    # the repo without a quant: whichever quant the cache holds
    assert offline.resolve(parse_hub("acme/Tiny-GGUF")).path == online.path
    with pytest.raises(NotInCache) as err:
        offline.resolve(parse_hub("acme/Tiny-GGUF:Q4_K_M"))
    assert str(err.value) == (
        "acme/Tiny-GGUF:Q4_K_M is not in the cache (it holds Q8_0); "
        "pull it while online: localspec pull acme/Tiny-GGUF:Q4_K_M"
    )
    with pytest.raises(NotInCache, match="^acme/Tiny-Split-GGUF is not in the cache"):
        offline.resolve(parse_hub("acme/Tiny-Split-GGUF"))
    assert standin.requests == []


def test_unreachable_hub(hub: Hub, tmp_path: Path) -> None:
    import socket

    hub.resolve(parse_hub("acme/Tiny-GGUF"))
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    down = Hub(endpoint=f"http://127.0.0.1:{port}", cache_dir=hub.cache_dir)
    assert down.resolve(parse_hub("acme/Tiny-GGUF")).path.is_file()  # cached: runs from the cache
    with pytest.raises(HubUnreachable) as err:
        down.resolve(parse_hub("acme/Tiny-Split-GGUF"))
    assert str(err.value) == (
        f"Cannot reach the Hub at http://127.0.0.1:{port} to find acme/Tiny-Split-GGUF, and it is not in the cache."
    )


def test_hostile_names_from_the_hub_never_become_paths(hub: Hub, standin: StandinHub, tiny_model: Path) -> None:
    standin.repos["acme/Evil-GGUF"] = Repo({"../../../escape-Q4_K_M.gguf": tiny_model, "ok-Q8_0.gguf": tiny_model})
    got = hub.resolve(parse_hub("acme/Evil-GGUF"))
    assert got.path.name == "ok-Q8_0.gguf" and got.quant == "Q8_0"
    assert not list(hub.cache_dir.parent.rglob("escape*"))
    standin.repos["acme/Evil2-GGUF"] = Repo({"m-Q4_K_M.gguf": tiny_model}, commit="../../../../tmp/x")
    with pytest.raises(HubError, match="invalid commit id"):
        hub.resolve(parse_hub("acme/Evil2-GGUF"))
