"""Model names: every Hub form, and names that try to escape the cache."""

from __future__ import annotations

import pytest

from localspec.errors import HubError, InvalidModelName
from localspec.resolve.hub import Listing, RepoFile, choose, groups, quant_of
from localspec.resolve.names import HubRef, looks_like_hub, parse_hub


@pytest.mark.parametrize(
    "name, ref",
    [
        ("org/repo", HubRef("org/repo")),
        ("org/repo:q8_0", HubRef("org/repo", quant="Q8_0")),
        ("org/repo:Q4_K_M", HubRef("org/repo", quant="Q4_K_M")),
        ("hf.co/org/repo:Q4_K_M", HubRef("org/repo", quant="Q4_K_M")),
        ("https://huggingface.co/org/repo", HubRef("org/repo")),
        ("org/repo/model-q4_0.gguf", HubRef("org/repo", filename="model-q4_0.gguf")),
        ("org/repo/sub/dir/m.gguf", HubRef("org/repo", filename="sub/dir/m.gguf")),
        ("org/repo@v1.0", HubRef("org/repo", revision="v1.0")),
        ("org/repo@v1.0:q5_k_m", HubRef("org/repo", quant="Q5_K_M", revision="v1.0")),
        ("org/repo:q5_k_m@v1.0", HubRef("org/repo", quant="Q5_K_M", revision="v1.0")),
        ("org/repo/m.gguf@" + "a" * 40, HubRef("org/repo", filename="m.gguf", revision="a" * 40)),
        ("Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF", HubRef("Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF")),
    ],
)
def test_hub_name_forms(name: str, ref: HubRef) -> None:
    assert parse_hub(name) == ref


@pytest.mark.parametrize(
    "name",
    [
        "org/../etc",
        "../org/repo",
        "org/repo/../../x.gguf",
        "org/repo/./x.gguf",
        "org//repo",
        "org/repo/",
        "/org/repo",
        "org/repo\\..\\x.gguf",
        "org/re\x00po",
        "org/repo/x.gguf:Q4_0",  # a file and a quant
        "org/repo:Q4_0:Q8_0",
        "org/repo@main@dev",
        "org/repo@../../x",
        "org/repo/notes.txt",
        "org/repo:Q4-0!",
        "-org/repo",
        "org",
    ],
)
def test_path_tricks_and_malformed_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidModelName) as err:
        parse_hub(name)
    assert "not a valid Hub model name" in str(err.value)


def test_hub_or_path(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.gguf").write_bytes(b"GGUF")
    assert looks_like_hub("org/repo")
    assert looks_like_hub("hf.co/org/repo")
    assert not looks_like_hub("models/m.gguf")  # an existing file wins
    assert not looks_like_hub("./org/repo")
    assert not looks_like_hub("m.gguf")


@pytest.mark.parametrize(
    "filename, quant",
    [
        ("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "Q4_K_M"),
        ("Meta-Llama-3.1-8B-Instruct-Q8_0.gguf", "Q8_0"),
        ("gemma-3-4b-it-UD-Q4_K_XL.gguf", "Q4_K_XL"),
        ("model-IQ4_XS.gguf", "IQ4_XS"),
        ("model.f16.gguf", "F16"),
        ("model-BF16-00001-of-00002.gguf", "BF16"),
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1"),
        ("qwen2.5-1.5b.gguf", None),
    ],
)
def test_quant_of(filename: str, quant: str | None) -> None:
    assert quant_of(filename) == quant


def _listing(*names: str) -> Listing:
    return Listing("org/repo", "main", "c" * 40, tuple(RepoFile(n, 100) for n in names))


def test_default_quant_is_q4_k_m_else_the_closest() -> None:
    files = ("m-Q8_0.gguf", "m-Q4_K_M.gguf", "m-F16.gguf", "README.md", "mmproj-m-F16.gguf")
    assert choose(HubRef("org/repo"), _listing(*files)).quant == "Q4_K_M"
    assert choose(HubRef("org/repo"), _listing("m-Q8_0.gguf", "m-F16.gguf", "m-Q5_K_M.gguf")).quant == "Q5_K_M"
    assert choose(HubRef("org/repo"), _listing("m-F16.gguf", "m-Q8_0.gguf")).quant == "Q8_0"
    assert choose(HubRef("org/repo"), _listing("only.gguf")).parts[0].path == "only.gguf"


def test_unknown_quant_lists_the_available_ones() -> None:
    with pytest.raises(HubError) as err:
        choose(HubRef("org/repo", quant="Q2_K"), _listing("m-Q8_0.gguf", "m-Q4_K_M.gguf"))
    assert str(err.value) == "org/repo has no Q2_K file; available: Q4_K_M, Q8_0."


def test_no_gguf_in_repo() -> None:
    with pytest.raises(HubError, match="has no GGUF model files"):
        choose(HubRef("org/repo"), _listing("model.safetensors", "config.json"))


def test_split_files_are_one_model_in_part_order() -> None:
    files = ("m-q8_0-00002-of-00003.gguf", "m-q8_0-00001-of-00003.gguf", "m-q8_0-00003-of-00003.gguf",
             "m-q4_k_m.gguf", "m-q6_k-00001-of-00002.gguf")  # q6_k is missing a part
    models = groups(_listing(*files).files)
    assert [(c.quant, [p.path for p in c.parts]) for c in models] == [
        ("Q4_K_M", ["m-q4_k_m.gguf"]),
        ("Q8_0", ["m-q8_0-00001-of-00003.gguf", "m-q8_0-00002-of-00003.gguf", "m-q8_0-00003-of-00003.gguf"]),
    ]
    chosen = choose(HubRef("org/repo", filename="m-q8_0-00002-of-00003.gguf"), _listing(*files))
    assert chosen.parts[0].path == "m-q8_0-00001-of-00003.gguf" and len(chosen.parts) == 3
