"""The prompt cache on disk (engine/promptcache.py) with real llama.cpp: long prompts'
KV states saved, found by their longest shared prefix, loaded losslessly, and every
damaged or foreign file removed and prefilled instead."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from localspec.engine import Engine, EngineConfig, promptcache
from localspec.types import Message, Request, SamplingParams, SpecConfig
from tinymodels import TinySpec, write_tiny_model

GREEDY = SamplingParams(temperature=0.0)
# ~1,150 tokens on the tiny byte-level vocabulary (MIN_TOKENS is 512); a restored prefix
# ends on a multiple of the batch size (512): DOC's is 1,024 tokens
DOC = "".join(f"line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(28))
BLOCK = 512


OFF = SpecConfig(mode="off")


def engine(model: Path, cache: Path | None, **kw) -> Engine:
    """Plain decoding unless a test asks for speculation: whether a draft is placed
    depends on timings, and a batch of another size may round otherwise (the cache's own
    exactness is what these tests check)."""
    return Engine(model, EngineConfig(n_ctx=2048, prompt_cache_dir=cache, **{"spec": OFF, **kw}))


def ask(model: Path, cache: Path | None, prompt: str, max_tokens: int = 24, key: str = "", **kw):
    with engine(model, cache, **kw) as e:
        return e.generate(Request(prompt=prompt, sampling=GREEDY, max_tokens=max_tokens, store_key=key))


def states(cache: Path) -> list[Path]:
    return sorted(cache.rglob("*.state"))


def test_a_long_prompt_is_saved_and_the_next_process_loads_it(tiny_model: Path, tmp_path: Path):
    cache = tmp_path / "prompts"
    first = ask(tiny_model, cache, DOC + "Q: one?")
    assert first.usage.cached_tokens == 0 and len(states(cache)) == 1
    again = ask(tiny_model, cache, DOC + "Q: one?")
    assert again.usage.cached_tokens == (first.usage.prompt_tokens - 1) // BLOCK * BLOCK == 1024
    assert again.text == first.text


def test_the_longest_saved_prefix_is_found_a_leading_part_or_none(tiny_model: Path, tmp_path: Path):
    cache = tmp_path / "prompts"
    ask(tiny_model, cache, DOC + "Q: one?")
    longer = DOC + "more text that the first prompt did not have. " * 12
    ask(tiny_model, cache, longer + "Q: two?")  # shares DOC, adds 400+ tokens: saved too
    assert len(states(cache)) == 2
    with engine(tiny_model, cache) as e:
        assert len(e.prepare(Request(prompt=DOC))[0]) < 1536 < len(e.prepare(Request(prompt=longer))[0])
    part = ask(tiny_model, cache, DOC + "Q: another question?")
    assert part.usage.cached_tokens == 1024  # DOC's leading part
    deeper = ask(tiny_model, cache, longer + "Q: three?")
    assert deeper.usage.cached_tokens == 1536  # from the longer state, not DOC's
    none = ask(tiny_model, cache, "something else entirely. " * 30)
    assert none.usage.cached_tokens == 0


def test_a_restored_prefix_gives_the_fresh_prefills_text(tiny_model: Path, tmp_path: Path):
    cache = tmp_path / "prompts"
    ask(tiny_model, cache, DOC + "Q: one?")
    for question in ("Q: two?", "Q: what comes after line 13?"):
        fresh = ask(tiny_model, None, DOC + question, max_tokens=64)
        restored = ask(tiny_model, cache, DOC + question, max_tokens=64)
        assert restored.usage.cached_tokens > 500
        assert restored.text == fresh.text


@pytest.mark.parametrize("mode", ["ngram", "draft"])
def test_lossless_with_speculation_and_the_drafts_own_state(tiny_model: Path, tiny_draft: Path, tmp_path: Path,
                                                            mode: str):
    cache = tmp_path / "prompts"
    spec = SpecConfig(mode=mode, draft_max=4)
    kw = {"draft_model": tiny_draft, "spec": spec}
    first = ask(tiny_model, cache, DOC + "Q: one?", max_tokens=48, **kw)
    fresh = ask(tiny_model, None, DOC + "Q: two?", max_tokens=48, **kw)
    with engine(tiny_model, cache, **kw) as e:
        restored = e.generate(Request(prompt=DOC + "Q: two?", sampling=GREEDY, max_tokens=48))
        draft_tokens = e.draft.cached(0, e.prepare(Request(prompt=DOC))[0])
    assert restored.usage.cached_tokens > 500 and restored.text == fresh.text
    if "draft" in first.spec.by_drafter:  # the draft model drafted (its costs allowed): its context was saved,
        assert len({p.parent for p in states(cache)}) == 2  # and loaded with the target's
        assert draft_tokens >= 500


def test_smollm2_restored_equals_fresh(smollm2: Path, tmp_path: Path):
    cache = tmp_path / "prompts"
    doc = "".join(f"def f{i}(x):\n    return x * {i} + {i * 7}\n\n" for i in range(40))
    messages = lambda q: Request(messages=[Message("user", doc + q)], sampling=GREEDY, max_tokens=40)  # noqa: E731
    with engine(smollm2, cache) as e:
        e.generate(messages("What does f3 return for 2?"))
    with engine(smollm2, cache) as e:
        restored = e.generate(messages("Which function adds 21?"))
    with engine(smollm2, None) as e:
        fresh = e.generate(messages("Which function adds 21?"))
    assert restored.usage.cached_tokens > 500
    assert restored.text == fresh.text


def _damage_and_ask(tiny_model: Path, cache: Path, damage) -> tuple:
    first = ask(tiny_model, cache, DOC + "Q: one?")
    [path] = states(cache)
    damage(path)
    again = ask(tiny_model, cache, DOC + "Q: one?")
    return first, again, path


def test_a_truncated_file_is_removed_and_the_prompt_prefilled(tiny_model: Path, tmp_path: Path):
    cache = tmp_path / "prompts"
    first, again, path = _damage_and_ask(tiny_model, cache, lambda p: os.truncate(p, p.stat().st_size - 100))
    assert again.usage.cached_tokens == 0 and again.text == first.text
    assert len(states(cache)) == 1 and states(cache)[0].stat().st_size > path.stat().st_size - 200  # saved anew, whole


def test_a_flipped_byte_is_caught_by_the_checksum(tiny_model: Path, tmp_path: Path):
    cache = tmp_path / "prompts"

    def flip(p: Path) -> None:
        data = bytearray(p.read_bytes())
        data[-5000] ^= 0x40
        p.write_bytes(bytes(data))

    first, again, path = _damage_and_ask(tiny_model, cache, flip)
    assert again.usage.cached_tokens == 0 and again.text == first.text
    again2 = ask(tiny_model, cache, DOC + "Q: one?")  # the new file, whole, is loaded
    assert again2.usage.cached_tokens > 500


def test_a_damaged_header_is_removed(tiny_model: Path, tmp_path: Path):
    cache = tmp_path / "prompts"
    first, again, _ = _damage_and_ask(tiny_model, cache, lambda p: p.write_bytes(b"LSPROMPT" + p.read_bytes()[8:40]))
    assert again.usage.cached_tokens == 0 and again.text == first.text


def test_another_model_at_the_same_path_never_loads_the_old_state(tmp_path: Path):
    model = write_tiny_model(tmp_path / "m.gguf", TinySpec(seed=3))
    cache = tmp_path / "prompts"
    ask(model, cache, DOC + "Q: one?")
    [old] = states(cache)
    before = old.read_bytes()
    write_tiny_model(model, TinySpec(seed=4))  # same name, other weights
    fresh = ask(model, None, DOC + "Q: one?")
    again = ask(model, cache, DOC + "Q: one?")
    assert again.usage.cached_tokens == 0 and again.text == fresh.text
    assert states(cache) == [old] and old.read_bytes() != before  # removed, then saved anew for the new model


def test_another_kv_type_never_loads_the_state(tmp_path: Path):
    model = write_tiny_model(tmp_path / "wide.gguf", TinySpec(seed=5, n_embd=256, n_head=4, n_head_kv=2))  # head 64
    cache = tmp_path / "prompts"
    ask(model, cache, DOC + "Q: one?")
    [old] = states(cache)
    before = old.read_bytes()
    quantised = ask(model, cache, DOC + "Q: one?", kv_type="q8_0")
    assert quantised.usage.cached_tokens == 0
    assert len(states(cache)) == 1 and old.read_bytes() != before  # the f16 state went; a q8_0 one came
    assert ask(model, cache, DOC + "Q: one?", kv_type="q8_0").usage.cached_tokens == 1024


def test_one_api_keys_prompts_are_never_loaded_for_another(tiny_model: Path, tmp_path: Path):
    cache = tmp_path / "prompts"
    ask(tiny_model, cache, DOC + "Q: one?", key="alice")
    assert ask(tiny_model, cache, DOC + "Q: one?", key="bob").usage.cached_tokens == 0
    assert ask(tiny_model, cache, DOC + "Q: one?", key="alice").usage.cached_tokens > 500


def test_eviction_keeps_the_cache_under_its_size(tiny_model: Path, tmp_path: Path):
    cache = tmp_path / "prompts"
    ask(tiny_model, cache, DOC + "Q: one?")
    one = states(cache)[0].stat().st_size
    limit = int(one * 2.5)
    with engine(tiny_model, cache, prompt_cache_size=limit) as e:
        for i in range(5):
            e.generate(Request(prompt=f"{i} unrelated text number {i}. " * 30, sampling=GREEDY, max_tokens=4))
            e.generate(Request(prompt="pad", sampling=GREEDY, max_tokens=1))  # the slot forgets prompt i
    sizes = [p.stat().st_size for p in states(cache)]
    assert sum(sizes) <= limit and 2 <= len(sizes) < 6
    with engine(tiny_model, cache, prompt_cache_size=1 << 30) as e:  # a bigger limit: nothing more goes
        newest = e.generate(Request(prompt="4 unrelated text number 4. " * 30, sampling=GREEDY, max_tokens=4))
        oldest = e.generate(Request(prompt="0 unrelated text number 0. " * 30, sampling=GREEDY, max_tokens=4))
        first = e.generate(Request(prompt=DOC + "Q: one?", sampling=GREEDY, max_tokens=4))
    assert newest.usage.cached_tokens == 512  # the least recently used went first
    assert oldest.usage.cached_tokens < 512 and first.usage.cached_tokens < 512  # (a token or two: the slot's own)


def test_an_unwritable_cache_folder_never_fails_a_request(tiny_model: Path, tmp_path: Path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = ask(tiny_model, blocker / "prompts", DOC + "Q: one?")
    assert result.finish_reason.value == "length" and result.text


def test_two_writers_of_one_entry_leave_one_valid_file(tiny_model: Path, tmp_path: Path):
    cache = tmp_path / "prompts"
    ask(tiny_model, cache, DOC + "Q: one?")
    [path] = states(cache)
    with engine(tiny_model, cache) as e:
        tokens = e.prepare(Request(prompt=DOC + "Q: one?"))[0]
        hit = e.prompt_cache.lookup(tokens)
        state = e.prompt_cache.read(hit)
    path.unlink()
    caches = [promptcache.PromptCache(cache, e.prompt_cache.identity) for _ in range(4)]
    threads = [threading.Thread(target=c.save, args=(tokens, bytearray(state))) for c in caches]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    for c in caches:
        c.close()
    assert len(states(cache)) == 1 and not list(cache.rglob(".tmp-*"))
    assert ask(tiny_model, cache, DOC + "Q: one?").usage.cached_tokens == 1024


def test_short_prompts_and_cache_prompt_false_write_nothing(tiny_model: Path, tmp_path: Path):
    cache = tmp_path / "prompts"
    ask(tiny_model, cache, "a short prompt")
    with engine(tiny_model, cache) as e:
        e.generate(Request(prompt=DOC, sampling=GREEDY, max_tokens=4, cache_prompt=False))
    assert states(cache) == []


# ---------------------------------------------------------------- the front ends

CLI = [sys.executable, "-m", "localspec"]


def cli(*args: str, cache: Path, env: dict[str, str] | None = None, stdin: str | None = None):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, input=stdin,
                          env={**os.environ, "LOCALSPEC_PROMPT_CACHE_DIR": str(cache), **(env or {})})


def test_a_second_run_on_the_same_file_starts_from_its_saved_prefix(tiny_model: Path, tmp_path: Path):
    """With no flags: run saves the file's prefix; another question about it loads it."""
    cache, doc = tmp_path / "prompts", tmp_path / "doc.txt"
    doc.write_text(DOC)
    first = cli("run", str(tiny_model), "Q: which line is first?", "-f", str(doc), "--json", "-n", "8",
                "--temperature", "0", cache=cache)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["usage"]["cached_tokens"] == 0 and len(states(cache)) == 1
    second = cli("run", str(tiny_model), "Q: and the last?", "--json", "-n", "8", "--temperature", "0", "-v",
                 cache=cache, stdin=DOC)  # the same text, piped this time
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["usage"]["cached_tokens"] == 1024
    assert "1024 of the prompt's" in second.stderr and "loaded from disk" in second.stderr
    fresh = cli("run", str(tiny_model), "Q: and the last?", "--json", "-n", "8", "--temperature", "0",
                "--no-prompt-cache", cache=tmp_path / "unused", stdin=DOC)
    assert json.loads(fresh.stdout)["text"] == json.loads(second.stdout)["text"]
    assert not (tmp_path / "unused").exists()


def test_the_prompt_cache_turns_off_by_flag_or_variable(tiny_model: Path, tmp_path: Path):
    cache = tmp_path / "prompts"
    for how in (["--no-prompt-cache"], ["--prompt-cache-size", "0"]):
        res = cli("run", str(tiny_model), DOC, "-n", "2", *how, cache=cache)
        assert res.returncode == 0, res.stderr
    res = cli("run", str(tiny_model), DOC, "-n", "2", cache=cache, env={"LOCALSPEC_NO_PROMPT_CACHE": "1"})
    assert res.returncode == 0 and not cache.exists()
    bad = cli("run", str(tiny_model), DOC, "-n", "2", "--prompt-cache-size", "lots", cache=cache)
    assert bad.returncode == 2 and "--prompt-cache-size" in bad.stderr and "Traceback" not in bad.stderr


def test_a_damaged_file_is_one_note_at_verbose_and_the_run_succeeds(tiny_model: Path, tmp_path: Path):
    cache = tmp_path / "prompts"
    cli("run", str(tiny_model), DOC, "-n", "2", cache=cache)
    [path] = states(cache)
    os.truncate(path, 4000)
    res = cli("run", str(tiny_model), DOC, "-n", "2", "-v", "--json", cache=cache)
    assert res.returncode == 0 and json.loads(res.stdout)["usage"]["cached_tokens"] == 0
    assert f"removed {path.name}" in res.stderr and "Traceback" not in res.stderr


def test_a_restarted_server_keeps_each_keys_contexts(tiny_model: Path, tmp_path: Path):
    from .test_serve import Server

    env = {"LOCALSPEC_PROMPT_CACHE_DIR": str(tmp_path / "prompts")}
    messages = [{"role": "system", "content": DOC}, {"role": "user", "content": "What is line 3?"}]

    def ask_as(srv: Server, key: str) -> tuple[int, str]:
        r = srv.client(api_key=key).chat.completions.create(model="tiny", messages=messages, max_tokens=8,
                                                             temperature=0)
        return r.usage.prompt_tokens_details.cached_tokens, r.choices[0].message.content

    args = ("--ctx-size", "2048", "--alias", "tiny", "--api-key", "alice", "--api-key", "bob")
    srv = Server(tiny_model, *args, env=env)
    try:
        srv.wait_ready()
        cached, first = ask_as(srv, "alice")
        assert cached == 0
    finally:
        assert srv.stop() == 0
    srv = Server(tiny_model, *args, env=env)
    try:
        srv.wait_ready()
        assert ask_as(srv, "bob")[0] == 0  # alice's context is hers alone
        cached, again = ask_as(srv, "alice")
        assert cached >= 1024 and again == first
    finally:
        srv.stop()


def test_another_llama_cpp_build_never_loads_the_state(tiny_model: Path, tmp_path: Path):
    from dataclasses import replace

    cache = tmp_path / "prompts"
    ask(tiny_model, cache, DOC + "Q: one?")
    [old] = states(cache)
    with engine(tiny_model, None) as e:
        tokens = e.prepare(Request(prompt=DOC + "Q: one?"))[0]
        ours = promptcache.Identity.of(tiny_model, "0.0.1-other", "f16", e.ctx.state_options)
    other = promptcache.PromptCache(cache, replace(ours, build="0.0.1-other"))
    assert other.lookup(tokens) is None and not old.exists()


def test_batch_prompts_sharing_a_preamble_prefill_it_once(tiny_model: Path, tmp_path: Path):
    """Three prompts behind one long preamble, on one slot: the first saves it, the next
    start from it (in memory here, from disk in the next process)."""
    lines = tmp_path / "in.jsonl"
    lines.write_text("".join(json.dumps({"id": str(i), "prompt": DOC + f"Q: {i}?", "max_tokens": 4}) + "\n"
                             for i in range(3)))
    cache = tmp_path / "prompts"
    out = cli("batch", str(lines), "-m", str(tiny_model), "--temperature", "0", "--slots", "1", "--raw",
              cache=cache)
    assert out.returncode == 0, out.stderr
    cached = [json.loads(line)["usage"]["cached_tokens"] for line in out.stdout.splitlines()]
    assert cached[0] == 0 and all(c >= 1024 for c in cached[1:])
    again = cli("batch", str(lines), "-m", str(tiny_model), "--temperature", "0", "--slots", "1", "--raw",
                cache=cache)
    assert json.loads(again.stdout.splitlines()[0])["usage"]["cached_tokens"] == 1024  # from disk
