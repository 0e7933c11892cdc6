"""`localspec export`: our settings mapped onto vLLM's and SGLang's documented flags."""

from __future__ import annotations

import argparse
import json

import pytest

from localspec.errors import InvalidRequest
from localspec.export import Weights, handover
from localspec.resolve.gguf_info import origin_repo
from localspec.settings import build, updated

REPO = Weights("acme/Model-7B-Instruct", False, "test")
DRAFT = Weights("acme/Model-0.5B-Instruct", False, "test")


def flags(argv: list[str]) -> dict[str, str]:
    return {a: b for a, b in zip(argv, argv[1:] + [""]) if a.startswith("--")}


def test_the_shipped_qwen_profile_on_vllm_and_sglang() -> None:
    s = updated(build("qwen2.5-coder-1.5b", {}), {"slots": 4})
    v = handover("vllm", s, name="qwen2.5-coder-1.5b", target=Weights(s.source, False, "p"),
                 draft=Weights(s.draft_source, False, "p"))
    assert v.argv[:3] == ["vllm", "serve", "Qwen/Qwen2.5-Coder-1.5B-Instruct"]
    f = flags(v.argv)
    assert (f["--served-model-name"], f["--max-model-len"], f["--max-num-seqs"]) == ("qwen2.5-coder-1.5b", "8192", "4")
    assert json.loads(f["--speculative-config"]) == {
        "method": "draft_model", "model": "Qwen/Qwen2.5-Coder-0.5B-Instruct", "num_speculative_tokens": 4}
    assert json.loads(f["--override-generation-config"]) == {
        "temperature": 0.7, "top_k": 20, "top_p": 0.8, "min_p": 0.05, "repetition_penalty": 1.05}
    assert "--max-model-len" in v.argv
    g = handover("sglang", s, name="qwen2.5-coder-1.5b", target=Weights(s.source, False, "p"),
                 draft=Weights(s.draft_source, False, "p"))
    assert g.argv[:5] == ["python", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen2.5-Coder-1.5B-Instruct"]
    f = flags(g.argv)
    assert (f["--context-length"], f["--max-running-requests"], f["--speculative-algorithm"]) == ("8192", "4", "STANDALONE")
    assert (f["--speculative-draft-model-path"], f["--speculative-num-steps"], f["--speculative-eagle-topk"],
            f["--speculative-num-draft-tokens"]) == ("Qwen/Qwen2.5-Coder-0.5B-Instruct", "4", "1", "5")
    assert json.loads(f["--preferred-sampling-params"])["repetition_penalty"] == 1.05
    assert any("system prompt" in n for n in g.notes)


@pytest.mark.parametrize("profile", ["qwen2.5-coder-1.5b", "qwen2.5-coder-7b", "llama-3.1-8b-instruct", "gemma-3-4b-it"])
def test_every_shipped_profile_names_its_original_weights(profile: str) -> None:
    s = build(profile, {})
    assert s.source and s.draft_source and "GGUF" not in s.source + s.draft_source


def test_ngram_speculation_keeps_the_lookup_bounds_and_caps_k_at_draft_max() -> None:
    s = build("x.gguf", {"ngram_min": (2, "flag"), "ngram_max": (6, "flag"), "draft_max": (3, "flag")})
    v = flags(handover("vllm", s, name="x", target=REPO, draft=None).argv)
    assert json.loads(v["--speculative-config"]) == {
        "method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 6}
    g = handover("sglang", s, name="x", target=REPO, draft=None)
    f = flags(g.argv)
    assert (f["--speculative-algorithm"], f["--speculative-num-draft-tokens"]) == ("NGRAM", "3")
    assert (f["--speculative-ngram-min-match-window-size"], f["--speculative-ngram-max-match-window-size"]) == ("2", "6")
    assert any("CUDA only" in n for n in g.notes)


def test_spec_off_has_no_speculation_and_default_sampling_is_still_ours() -> None:
    s = build("x.gguf", {"spec": ("off", "flag")})
    argv = handover("vllm", s, name="x", target=REPO, draft=DRAFT).argv
    assert not any(a.startswith("--speculative") for a in argv)
    assert "--max-model-len" not in argv  # the model's own context when none is set
    # localspec's built-in defaults (llama.cpp's), so an unparameterised request samples alike
    assert json.loads(flags(argv)["--override-generation-config"]) == {
        "temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "repetition_penalty": 1.0}


def test_top_k_off_is_minus_one_and_per_request_settings_are_noted() -> None:
    s = build("x.gguf", {"top_k": (0, "flag"), "presence_penalty": (0.5, "flag"), "seed": (7, "flag"),
                         "kv_type": ("q8_0", "flag")})
    v = handover("vllm", s, name="x", target=REPO, draft=None)
    assert json.loads(flags(v.argv)["--override-generation-config"])["top_k"] == -1
    assert any("presence penalty 0.5 is per request" in n for n in v.notes)
    assert any("seed" in n for n in v.notes) and any("q8_0" in n for n in v.notes)
    g = handover("sglang", s, name="x", target=REPO, draft=None)  # SGLang takes presence penalty as a default
    assert json.loads(flags(g.argv)["--preferred-sampling-params"])["presence_penalty"] == 0.5


def test_a_draft_without_original_weights() -> None:
    gguf_draft = Weights("/m/draft.gguf", True, "the GGUF file")
    s = build("x.gguf", {"draft": ("/m/draft.gguf", "flag")})
    h = handover("vllm", s, name="x", target=REPO, draft=gguf_draft)  # auto: falls back to n-gram lookup, said
    assert json.loads(flags(h.argv)["--speculative-config"])["method"] == "ngram"
    assert any("--draft-source" in n for n in h.notes)
    with pytest.raises(InvalidRequest, match="--draft-source"):
        handover("vllm", updated(s, {"spec": "draft"}), name="x", target=REPO, draft=gguf_draft)
    with pytest.raises(InvalidRequest, match="needs a draft model"):
        handover("sglang", build("x.gguf", {"spec": ("draft", "flag")}), name="x", target=REPO, draft=None)


def test_a_gguf_target_is_served_as_is_and_said() -> None:
    h = handover("sglang", build("x.gguf", {}), name="x", target=Weights("acme/M-GGUF:Q4_K_M", True, "hub", parts=2),
                 draft=None)
    assert h.argv[4] == "acme/M-GGUF:Q4_K_M"
    assert any("split in 2 parts" in n for n in h.notes) and any("local path only" in n for n in h.notes)


def test_the_script_is_one_command_with_the_notes_as_comments() -> None:
    h = handover("vllm", build("x.gguf", {}), name="my model", target=REPO, draft=None)
    text = h.shell("title")
    lines = text.splitlines()
    assert lines[:2] == ["#!/bin/sh", "# title"] and all(line.startswith("# - ") for line in lines[2:2 + len(h.notes)])
    command = text.split("\n", 2 + len(h.notes))[-1].replace(" \\\n  ", " ")
    import shlex

    assert shlex.split(command) == h.argv


def test_origin_repo_reads_the_source_keys_not_the_base_model() -> None:
    assert origin_repo({"general.source.repo_url": "https://huggingface.co/acme/M-7B-Instruct"}) == "acme/M-7B-Instruct"
    assert origin_repo({"general.source.url": "https://huggingface.co/acme/M/tree/main"}) == "acme/M"
    assert origin_repo({"general.source.huggingface.repository": "acme/M"}) == "acme/M"
    assert origin_repo({"general.source.url": "https://github.com/acme/M"}) is None
    assert origin_repo({"general.base_model.0.repo_url": "https://huggingface.co/acme/M-7B"}) is None


def test_vllm_own_parser_takes_the_exported_arguments() -> None:
    pytest.importorskip("vllm")
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    from vllm.entrypoints.openai.cli_args import make_arg_parser

    s = build("qwen2.5-coder-1.5b", {})
    for draft in (Weights(s.draft_source, False, "p"), None):
        argv = handover("vllm", s, name="q", target=Weights(s.source, False, "p"), draft=draft).argv
        ns = make_arg_parser(FlexibleArgumentParser()).parse_args(argv[2:3] and ["--model", argv[2], *argv[3:]])
        assert ns.max_num_seqs == s.slots


def test_sglang_own_parser_takes_the_exported_arguments() -> None:
    pytest.importorskip("sglang")
    from sglang.srt.server_args import ServerArgs

    s = build("qwen2.5-coder-1.5b", {})
    for draft in (Weights(s.draft_source, False, "p"), None):
        argv = handover("sglang", s, name="q", target=Weights(s.source, False, "p"), draft=draft).argv
        parser = argparse.ArgumentParser()
        ServerArgs.add_cli_args(parser)
        ns = parser.parse_args(argv[3:])
        assert ns.max_running_requests == s.slots
