"""The engine API every front end uses: per-request speculation, async streams, one load
path, logit bias; and a request that fails never stops the engine (tiny f32 models)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import pytest

import localspec
from localspec.engine import Engine, EngineConfig
from localspec.errors import InvalidRequest
from localspec.types import FinishReason, Request, SamplingParams, SpecConfig

GREEDY = SamplingParams(temperature=0.0)
PROMPTS = ["hello there world", "the cat sat on the mat", "in a galaxy far, far away", "abc abc abc",
           "one two three one two", "x y z", "lorem ipsum dolor", "def f(x): return x"]


def ids(stream) -> list[int]:
    return [e.token_id for e in stream if e.token_id >= 0]


@pytest.fixture(scope="module")
def plain(tiny_model: Path) -> dict[str, list[int]]:
    with Engine(tiny_model, EngineConfig(n_ctx=512, spec=SpecConfig(mode="off"))) as e:
        return {p: ids(e.submit(Request(prompt=p, sampling=GREEDY, max_tokens=60))) for p in PROMPTS}


def test_two_requests_on_two_slots_with_their_own_speculation(tiny_model: Path, plain):
    """One request plain, one with n-gram drafts of at most 3 tokens, in the same batch:
    each gives plain greedy's tokens, and only the second drafts."""
    off = SpecConfig(mode="off")
    ngram = SpecConfig(mode="ngram", draft_max=3, adaptive=False, draft_p_min=0.0)
    with Engine(tiny_model, EngineConfig(n_ctx=512, n_slots=2)) as e:
        a = e.submit(Request(prompt=PROMPTS[3], sampling=GREEDY, max_tokens=60, spec=off))
        b = e.submit(Request(prompt=PROMPTS[4], sampling=GREEDY, max_tokens=60, spec=ngram))
        assert (ids(a), ids(b)) == (plain[PROMPTS[3]], plain[PROMPTS[4]])
    assert a.result.spec.drafted == 0 and a.result.spec.steps == 0
    assert b.result.spec.drafted > 10 and max(b.result.spec.draft_lengths) <= 3


def test_a_bad_speculation_setting_is_refused_in_one_sentence(tiny_engine: Engine):
    with pytest.raises(InvalidRequest, match="Unknown speculation mode 'fast'"):
        tiny_engine.submit(Request(prompt="hi", spec="fast"))
    with pytest.raises(InvalidRequest, match="draft_max must be"):
        SpecConfig(draft_max=0)
    with pytest.raises(InvalidRequest, match="ngram_min .* must not exceed"):
        SpecConfig(ngram_min=5, ngram_max=2)
    with pytest.raises(InvalidRequest, match="needs a draft model"):
        tiny_engine.submit(Request(prompt="hi", spec="draft"))


def test_eight_async_consumers_on_four_slots_get_the_synchronous_text(tiny_model: Path, plain):
    async def consume(engine: Engine, prompt: str) -> tuple[list[int], str]:
        stream = engine.submit(Request(prompt=prompt, sampling=GREEDY, max_tokens=60))
        tokens = [e.token_id async for e in stream if e.token_id >= 0]
        result = await stream
        assert stream.wait() is result  # the end, once, to every consumer
        return tokens, result.text

    async def main(engine: Engine):
        return await asyncio.wait_for(asyncio.gather(*(consume(engine, p) for p in PROMPTS)), 120)

    with Engine(tiny_model, EngineConfig(n_ctx=256, n_slots=4)) as e:
        got = asyncio.run(main(e))
        texts = [e.generate(Request(prompt=p, sampling=GREEDY, max_tokens=60)).text for p in PROMPTS]
    assert [tokens for tokens, _ in got] == [plain[p] for p in PROMPTS]
    assert [text for _, text in got] == texts


def test_an_async_cancel_frees_the_slot_within_one_step(tiny_model: Path):
    async def main(engine: Engine) -> tuple[int, localspec.Result]:
        stream = engine.submit(Request(prompt="abc", sampling=SamplingParams(temperature=1.0, seed=3), max_tokens=2000))
        seen = 0
        async for _ in stream:
            seen += 1
            if seen == 3:
                break
        at_cancel = engine.steps
        stream.cancel()
        result = await asyncio.wait_for(stream, 30)
        return engine.steps - at_cancel, result

    with Engine(tiny_model, EngineConfig(n_ctx=4096)) as e:
        steps, result = asyncio.run(main(e))
        assert result.finish_reason is FinishReason.CANCELLED
        assert steps <= 1  # the step under way when cancel() came, at most
        assert [s.state for s in e.slot_states()] == ["idle"]
        assert e.generate(Request(prompt="abc", sampling=GREEDY, max_tokens=3)).usage.completion_tokens == 3


def test_logit_bias_bans_a_token_with_and_without_speculation(tiny_model: Path, plain):
    prompt = PROMPTS[3]
    banned = plain[prompt][2]
    params = replace(GREEDY, logit_bias={banned: -100})
    with Engine(tiny_model, EngineConfig(n_ctx=512)) as e:
        off = ids(e.submit(Request(prompt=prompt, sampling=params, max_tokens=60, spec="off")))
        spec = e.submit(Request(prompt=prompt, sampling=params, max_tokens=60,
                                spec=SpecConfig(mode="ngram", adaptive=False, draft_max=4)))
        drafted = ids(spec)
        with pytest.raises(InvalidRequest, match="logit_bias token ids"):
            e.submit(Request(prompt=prompt, sampling=replace(GREEDY, logit_bias={10**9: 1.0})))
        with pytest.raises(InvalidRequest, match="logit_bias values"):
            e.submit(Request(prompt=prompt, sampling=replace(GREEDY, logit_bias={banned: -101})))
    assert banned not in off and off[:2] == plain[prompt][:2]
    assert drafted == off
    assert spec.result.spec.drafted > 0


def test_a_negative_seed_samples_and_reproduces(tiny_engine: Engine):
    req = Request(prompt="hello", sampling=SamplingParams(temperature=0.8, seed=-5), max_tokens=12)
    first = tiny_engine.generate(req)
    assert first.finish_reason is FinishReason.LENGTH and tiny_engine.generate(req).text == first.text


def test_a_request_that_fails_to_start_ends_alone_and_the_engine_goes_on(tiny_model: Path, monkeypatch):
    """A failure while admitting one request (forced here in the sampler's constructor)
    ends that request with the error; the engine thread and the other requests go on."""
    from localspec.engine import scheduler

    real = scheduler.Sampler

    def sampler(params, *args, **kwargs):
        if params.seed == 13:
            raise RuntimeError("boom")
        return real(params, *args, **kwargs)

    monkeypatch.setattr(scheduler, "Sampler", sampler)
    with Engine(tiny_model, EngineConfig(n_ctx=256, n_slots=2)) as e:
        good = e.submit(Request(prompt="abc", sampling=GREEDY, max_tokens=20))
        bad = e.submit(Request(prompt="abc", sampling=SamplingParams(seed=13), max_tokens=20))
        assert bad.wait().finish_reason is FinishReason.ERROR and "boom" in bad.result.error
        assert good.wait().finish_reason is FinishReason.LENGTH
        assert e._thread.is_alive()
        assert e.generate(Request(prompt="xyz", sampling=GREEDY, max_tokens=5)).usage.completion_tokens == 5


def test_open_engine_is_the_one_load_path(tiny_model: Path):
    t0 = time.perf_counter()
    with localspec.open_engine(tiny_model, slots=2, ctx_size=256, spec="ngram") as e:
        assert (e.plan.slots, e.plan.ctx_size, e.n_ctx) == (2, 256, 256)
        assert e.spec.mode == "ngram" and e.settings.sources["slots"] == "argument"
        assert e.generate(Request(prompt="abc", sampling=GREEDY, max_tokens=4)).usage.completion_tokens == 4
    assert time.perf_counter() - t0 < 60
    with pytest.raises(InvalidRequest, match="^slots must be at least 1"):
        localspec.open_engine(tiny_model, slots=0)
    with pytest.raises(InvalidRequest, match="^kv_type must be one of"):
        localspec.open_engine(tiny_model, kv_type="q2")


def test_n_choices_prefill_the_prompt_once_and_sample_apart(tiny_model: Path, plain):
    prompt = PROMPTS[1]
    with Engine(tiny_model, EngineConfig(n_ctx=256, n_slots=3, spec=SpecConfig(mode="off"))) as e:
        n_prompt = len(e.model.tokenize(prompt, add_special=True, parse_special=True))
        before = e.prefilled
        greedy = e.submit_n(Request(prompt=prompt, sampling=GREEDY, max_tokens=60), 3)
        assert [ids(s) for s in greedy] == [plain[prompt]] * 3
        assert e.prefilled - before == n_prompt  # once, then copied to the other two slots
        sampled = e.submit_n(Request(prompt=prompt, sampling=SamplingParams(temperature=1.0, seed=4), max_tokens=30), 3)
        texts = [ids(s) for s in sampled]
        assert len({tuple(t) for t in texts}) == 3  # seeds 4, 5, 6
        assert texts[1] == ids(e.submit(Request(prompt=prompt, sampling=SamplingParams(temperature=1.0, seed=5),
                                                max_tokens=30)))
        with pytest.raises(InvalidRequest, match="n must be from 1 to the number of slots"):
            e.submit_n(Request(prompt=prompt), 4)
