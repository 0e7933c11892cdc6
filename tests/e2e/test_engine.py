"""The engine with real llama.cpp on the tiny f32 model."""

from __future__ import annotations

from pathlib import Path

import pytest

from localspec.engine import Engine, EngineConfig
from localspec.errors import InvalidRequest, PromptTooLong
from localspec.types import FinishReason, Message, Request, SamplingParams

GREEDY = SamplingParams(temperature=0.0)
PROMPTS = ["hello there", "the cat sat on", "in a galaxy far"]


def tokens_of(engine: Engine, request: Request) -> tuple[list[int], str]:
    stream = engine.submit(request)
    ids = [e.token_id for e in stream if e.token_id >= 0]
    return ids, stream.result.text


def test_greedy_is_deterministic(tiny_engine: Engine):
    req = Request(prompt="hello", sampling=GREEDY, max_tokens=24)
    assert tokens_of(tiny_engine, req) == tokens_of(tiny_engine, req)


def test_a_seed_reproduces_sampling(tiny_engine: Engine):
    def sample(seed: int) -> list[int]:
        req = Request(prompt="hello", sampling=SamplingParams(temperature=0.8, seed=seed), max_tokens=24)
        return tokens_of(tiny_engine, req)[0]

    assert sample(1) == sample(1)
    assert sample(1) != sample(2)


def test_three_requests_batched_give_each_ones_greedy_tokens(tiny_engine: Engine):
    alone = [tokens_of(tiny_engine, Request(prompt=p, sampling=GREEDY, max_tokens=48))[0] for p in PROMPTS]
    streams = [tiny_engine.submit(Request(prompt=p, sampling=GREEDY, max_tokens=48)) for p in PROMPTS]
    together = [[e.token_id for e in s if e.token_id >= 0] for s in streams]
    assert together == alone
    assert sum(map(len, together)) > 40  # not a trivial comparison of EOS-only outputs


def test_streamed_text_never_splits_a_utf8_character(tiny_engine: Engine):
    """The byte-level tiny model emits arbitrary bytes: streamed pieces must add up to
    exactly the whole output decoded at once (no stray U+FFFD at token boundaries)."""
    req = Request(prompt="héllo wörld 😀", sampling=SamplingParams(temperature=1.0, seed=5, top_k=0, top_p=1.0, min_p=0.0), max_tokens=200)
    stream = tiny_engine.submit(req)
    events = list(stream)
    ids = [e.token_id for e in events if e.token_id >= 0]
    whole = b"".join(tiny_engine.model.token_to_piece(t) for t in ids).decode("utf-8", "replace")
    assert "".join(e.text for e in events) == whole == stream.result.text
    assert any(ord(c) > 127 and c != "\ufffd" for c in whole), "expected real multi-byte characters"


def test_stop_string_ends_generation_and_is_not_emitted(tiny_engine: Engine):
    full = tiny_engine.generate(Request(prompt="abc", sampling=GREEDY, max_tokens=40)).text
    stop = full[10:13]
    assert len(stop) == 3
    res = tiny_engine.generate(Request(prompt="abc", sampling=GREEDY, max_tokens=40, stop=[stop]))
    assert res.finish_reason is FinishReason.STOP
    assert res.text == full[: full.index(stop)]


def test_max_tokens_ends_with_length(tiny_engine: Engine):
    res = tiny_engine.generate(Request(prompt="abc", sampling=GREEDY, max_tokens=7))
    assert res.finish_reason is FinishReason.LENGTH and res.usage.completion_tokens == 7


def test_a_full_context_ends_with_length(tiny_model: Path):
    with Engine(tiny_model, EngineConfig(n_ctx=32)) as engine:
        res = engine.generate(Request(prompt="abc", sampling=GREEDY))
    assert res.finish_reason is FinishReason.LENGTH
    assert res.usage.prompt_tokens + res.usage.completion_tokens == 33


def test_a_prompt_longer_than_the_context_is_refused(tiny_engine: Engine):
    with pytest.raises(PromptTooLong, match="context holds 512"):
        tiny_engine.submit(Request(prompt="x" * 600, sampling=GREEDY))


def test_an_empty_prompt_is_refused(tiny_engine: Engine):
    with pytest.raises(InvalidRequest, match="empty"):
        tiny_engine.submit(Request(prompt="   ", sampling=GREEDY))


def test_chat_messages_use_the_models_template(tiny_engine: Engine):
    stream = tiny_engine.submit(Request(messages=[Message("user", "hi")], sampling=GREEDY, max_tokens=4))
    stream.wait()
    assert stream.template == "gguf"
    expected = tiny_engine.model.tokenize("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", add_special=True, parse_special=True)
    assert stream.prompt_tokens == len(expected)


def test_a_model_without_template_gets_the_plain_format(tiny_model_no_template: Path):
    with Engine(tiny_model_no_template, EngineConfig(n_ctx=256)) as engine:
        stream = engine.submit(Request(messages=[Message("user", "hi")], sampling=GREEDY, max_tokens=2))
        stream.wait()
    assert stream.template == "plain"


def test_the_same_prefix_is_reused_and_gives_the_same_tokens(tiny_model: Path):
    prompt = "a long shared prefix of text " * 4
    with Engine(tiny_model, EngineConfig(n_ctx=512)) as engine:
        first = engine.generate(Request(prompt=prompt + "one", sampling=GREEDY, max_tokens=16))
        second = engine.submit(Request(prompt=prompt + "two", sampling=GREEDY, max_tokens=16))
        second_text = second.wait().text
    with Engine(tiny_model, EngineConfig(n_ctx=512)) as fresh:
        expected = fresh.generate(Request(prompt=prompt + "two", sampling=GREEDY, max_tokens=16)).text
    assert first.usage.cached_tokens == 0
    assert second.result.usage.cached_tokens > 20
    assert second_text == expected


def test_cache_prompt_false_prefills_afresh(tiny_model: Path):
    prompt = "a long shared prefix of text " * 4
    with Engine(tiny_model, EngineConfig(n_ctx=512)) as engine:
        first = engine.generate(Request(prompt=prompt, sampling=GREEDY, max_tokens=8))
        again = engine.generate(Request(prompt=prompt, sampling=GREEDY, max_tokens=8, cache_prompt=False))
    assert again.usage.cached_tokens == 0 and again.text == first.text


def test_cancelling_one_stream_leaves_the_others_running(tiny_engine: Engine):
    long = tiny_engine.submit(Request(prompt="abc", sampling=SamplingParams(temperature=1.0, seed=1), max_tokens=400))
    other = tiny_engine.submit(Request(prompt="xyz", sampling=GREEDY, max_tokens=40))
    next(iter(long))
    long.cancel()
    assert long.wait().finish_reason is FinishReason.CANCELLED
    assert long.result.usage.completion_tokens < 400
    assert other.wait().finish_reason is FinishReason.LENGTH
    assert tiny_engine.generate(Request(prompt="abc", sampling=GREEDY, max_tokens=3)).usage.completion_tokens == 3


def test_closing_the_engine_ends_waiting_streams_and_its_thread(tiny_model: Path):
    engine = Engine(tiny_model, EngineConfig(n_ctx=2048))
    stream = engine.submit(Request(prompt="abc", sampling=SamplingParams(temperature=1.0, seed=1)))
    engine.close()
    assert stream.wait().finish_reason in (FinishReason.CANCELLED, FinishReason.LENGTH, FinishReason.EOS)
    assert not engine._thread.is_alive()


def test_more_requests_than_slots_queue_and_all_finish(tiny_model: Path):
    with Engine(tiny_model, EngineConfig(n_ctx=256, n_slots=2)) as engine:
        streams = [engine.submit(Request(prompt=f"req {i}", sampling=GREEDY, max_tokens=20)) for i in range(5)]
        results = [s.wait() for s in streams]
    assert [r.usage.completion_tokens for r in results] == [20] * 5
