"""Speculative decoding with real llama.cpp on the tiny f32 models: lossless, always."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from localspec.engine import Engine, EngineConfig
from localspec.engine.spec.costs import Costs
from localspec.errors import DraftMismatch, InvalidRequest
from localspec.types import Request, SamplingParams, SpecConfig

GREEDY = SamplingParams(temperature=0.0)
PROMPTS = ["hello there world", "the cat sat on the mat", "in a galaxy far, far away", "abc abc abc"]


def engine(target: Path, draft: Path | None = None, slots: int = 1, **spec) -> Engine:
    spec.setdefault("draft_p_min", 0.0)  # the random tiny models are rarely confident
    spec.setdefault("mode", "off")  # the plain reference
    return Engine(target, EngineConfig(n_ctx=512, n_slots=slots, draft_model=draft, spec=SpecConfig(**spec)))


def ids(stream) -> list[int]:
    return [e.token_id for e in stream if e.token_id >= 0]


@pytest.fixture(scope="module")
def plain_outputs(tiny_model: Path) -> dict[str, list[int]]:
    with engine(tiny_model) as e:
        return {p: ids(e.submit(Request(prompt=p, sampling=GREEDY, max_tokens=80))) for p in PROMPTS}


def test_a_model_drafting_for_itself_accepts_every_greedy_token(tiny_model: Path, plain_outputs):
    with engine(tiny_model, tiny_model, mode="draft", adaptive=False, draft_max=4) as e:
        for p in PROMPTS:
            stream = e.submit(Request(prompt=p, sampling=GREEDY, max_tokens=80))
            assert ids(stream) == plain_outputs[p]
            spec = stream.result.spec
            assert spec.mode == "draft" and spec.drafted > 40
            assert spec.accepted == spec.drafted


@pytest.mark.parametrize("mode,adaptive", [("ngram", True), ("ngram", False), ("draft", True), ("draft", False), ("auto", False)])
def test_greedy_output_equals_plain_greedy_token_for_token(tiny_model, tiny_draft, plain_outputs, mode, adaptive):
    draft = tiny_draft if mode != "ngram" else None
    rejected = 0
    with engine(tiny_model, draft, mode=mode, adaptive=adaptive, draft_max=6) as e:
        for p in PROMPTS:
            stream = e.submit(Request(prompt=p, sampling=GREEDY, max_tokens=80))
            assert ids(stream) == plain_outputs[p], p
            spec = stream.result.spec
            rejected += spec.drafted - spec.accepted
    if not adaptive:
        assert rejected > 10  # rollbacks really happened


def test_drafted_tokens_are_marked_in_the_stream(tiny_model: Path):
    with engine(tiny_model, tiny_model, mode="draft", adaptive=False, draft_max=3) as e:
        events = list(e.submit(Request(prompt="hello", sampling=GREEDY, max_tokens=40)))
    flags = [ev.from_draft for ev in events if ev.token_id >= 0]
    assert flags[0] is False and sum(flags) > 20


def test_kv_rollback_leaves_both_contexts_consistent(tiny_model: Path, tiny_draft: Path):
    """Generate with many rejections, then continue from a prefix of that output in the
    same engine (reusing its KV cache in both contexts): the tokens must be those of the
    first run, and those of a fresh engine."""
    with engine(tiny_model, tiny_draft, mode="draft", adaptive=False, draft_max=5) as e:
        prompt = e.model.tokenize("once upon a time", add_special=True, parse_special=True)
        first = e.submit(Request(prompt_tokens=prompt, sampling=GREEDY, max_tokens=60))
        out = ids(first)
        assert first.result.spec.drafted > first.result.spec.accepted
        again = e.submit(Request(prompt_tokens=prompt + out[:40], sampling=GREEDY, max_tokens=20))
        cont = ids(again)
        assert again.result.usage.cached_tokens >= len(prompt) + 39
        assert cont == out[40:60]
    with engine(tiny_model) as fresh:
        assert ids(fresh.submit(Request(prompt_tokens=prompt + out[:40], sampling=GREEDY, max_tokens=20))) == cont


def test_padded_batches_give_plain_output_and_a_consistent_cache(tiny_model: Path, plain_outputs, monkeypatch):
    """Where a larger batch was measured cheaper, drafts are padded with rows that want no
    logits (Costs.pad_to); forced here at every draft step, with the model drafting for
    itself, so that every draft is kept and only the padding is rolled back. The output is
    still plain greedy's, and a request continuing from part of it reuses a cache that
    holds exactly the kept tokens."""
    padding = []

    def pad_more(self, b: int, limit: int) -> int:
        size = min(limit, b + 5) if b > 1 else b
        padding.append(size - b)
        return size

    monkeypatch.setattr(Costs, "pad_to", pad_more)
    with engine(tiny_model, tiny_model, mode="draft", adaptive=False, draft_max=4) as e:
        for p in PROMPTS:
            assert ids(e.submit(Request(prompt=p, sampling=GREEDY, max_tokens=80))) == plain_outputs[p], p
        assert sum(padding) > 50
        prompt = e.model.tokenize(PROMPTS[-1], add_special=True, parse_special=True)
        again = e.submit(Request(prompt_tokens=prompt + plain_outputs[PROMPTS[-1]][:40], sampling=GREEDY,
                                 max_tokens=20))
        assert ids(again) == plain_outputs[PROMPTS[-1]][40:60]
        assert again.result.usage.cached_tokens >= len(prompt) + 39


def test_three_requests_with_speculation_together_equal_each_alone(tiny_model, tiny_draft, plain_outputs):
    with engine(tiny_model, tiny_draft, slots=3, mode="auto", adaptive=False, draft_max=4) as e:
        streams = [e.submit(Request(prompt=p, sampling=GREEDY, max_tokens=80)) for p in PROMPTS[:3]]
        assert [ids(s) for s in streams] == [plain_outputs[p] for p in PROMPTS[:3]]


def test_drafts_of_many_slots_share_a_small_batch(tiny_model, plain_outputs):
    """Three slots drafting up to 16 tokens each would need 51 rows; a 16-row batch gives
    each a share (here 4 drafts) instead of writing past its end."""
    config = EngineConfig(n_ctx=512, n_slots=3, n_batch=16,
                          spec=SpecConfig(mode="ngram", adaptive=False, draft_max=16, draft_p_min=0.0))
    with Engine(tiny_model, config) as e:
        streams = [e.submit(Request(prompt=p, sampling=GREEDY, max_tokens=80)) for p in PROMPTS[:3]]
        outs = [ids(s) for s in streams]
        stats = [s.result.spec for s in streams]
    assert outs == [plain_outputs[p] for p in PROMPTS[:3]]
    assert sum(st.drafted for st in stats) > 0 and max(max(st.draft_lengths) for st in stats) <= 4


def _chi2_two_sample(a: list[int], b: list[int]) -> tuple[float, int]:
    cats = sorted(set(a) | set(b))
    ca = np.array([a.count(c) for c in cats], dtype=float)
    cb = np.array([b.count(c) for c in cats], dtype=float)
    # pool sparse categories so every expected count is at least 5
    keep = (ca + cb) >= 10
    if (~keep).any():
        ca = np.append(ca[keep], ca[~keep].sum())
        cb = np.append(cb[keep], cb[~keep].sum())
    na, nb = ca.sum(), cb.sum()
    tot = ca + cb
    ea, eb = tot * na / (na + nb), tot * nb / (na + nb)
    chi2 = float((((ca - ea) ** 2) / ea).sum() + (((cb - eb) ** 2) / eb).sum())
    return chi2, len(tot) - 1


def _critical(dof: int) -> float:
    """Chi-square critical value at false-alarm rate 0.001 (Wilson-Hilferty)."""
    z = 3.090
    return dof * (1 - 2 / (9 * dof) + z * (2 / (9 * dof)) ** 0.5) ** 3


def _first_tokens(e: Engine, n_seeds: int, spec: str) -> list[tuple[int, ...]]:
    out = []
    for seed in range(n_seeds):
        s = SamplingParams(temperature=0.8, top_k=6, top_p=1.0, min_p=0.0, seed=seed)
        out.append(tuple(ids(e.submit(Request(prompt="the cat", sampling=s, max_tokens=4, spec=spec)))))
    return out


@pytest.fixture(scope="module")
def sampled(tiny_model: Path, tiny_draft: Path):
    with engine(tiny_model, tiny_draft, mode="draft", adaptive=False, draft_max=3) as e:
        plain = _first_tokens(e, 700, "off")
        spec = _first_tokens(e, 700, "draft")
    return plain, spec


def test_sampled_distribution_with_speculation_matches_plain_sampling(sampled):
    plain, spec = sampled
    for pos in range(1, 4):  # positions 1..3 come out of draft verification
        chi2, dof = _chi2_two_sample([t[pos] for t in plain], [t[pos] for t in spec])
        assert chi2 < _critical(dof), (pos, chi2, dof)


def test_the_distribution_test_would_catch_a_lossy_verifier(sampled, tiny_model, tiny_draft, monkeypatch):
    """Power check: accepting every draft (emitting the draft's distribution) must fail."""
    from localspec.engine import scheduler

    def accept_all(drafts, qs, target, rng, draw):
        return len(drafts), draw(target(len(drafts)))

    monkeypatch.setattr(scheduler, "verify", accept_all)
    plain, _ = sampled
    with engine(tiny_model, tiny_draft, mode="draft", adaptive=False, draft_max=3) as e:
        lossy = _first_tokens(e, 700, "draft")
    chi2, dof = _chi2_two_sample([t[1] for t in plain], [t[1] for t in lossy])
    assert chi2 > _critical(dof)


def test_a_seed_gives_the_same_sampled_text_with_and_without_ngram_drafts(tiny_model: Path):
    s = SamplingParams(temperature=0.9, seed=21)
    with engine(tiny_model, None, mode="ngram", adaptive=False, draft_max=4) as e:
        plain = e.submit(Request(prompt="abc abc abc abc", sampling=s, max_tokens=120, spec="off"))
        spec = e.submit(Request(prompt="abc abc abc abc", sampling=s, max_tokens=120, spec="ngram"))
        assert ids(spec) == ids(plain)
        assert spec.result.spec.drafted > 20


def test_a_draft_with_another_vocabulary_is_refused(tiny_model: Path, tiny_other_vocab: Path):
    with pytest.raises(DraftMismatch) as err:
        engine(tiny_model, tiny_other_vocab, mode="draft")
    assert "tiny-other-vocab.gguf" in str(err.value) and "tiny.gguf" in str(err.value)
    assert "token" in str(err.value)


def test_draft_mode_without_a_draft_model_is_refused(tiny_model: Path):
    with pytest.raises(InvalidRequest, match="draft model"):
        engine(tiny_model, None, mode="draft")


def test_measured_costs_are_remembered_for_the_next_engine(tiny_model: Path, tmp_path: Path, monkeypatch):
    from localspec.engine.spec import costs as costs_cache

    monkeypatch.delenv("LOCALSPEC_NO_COST_CACHE")
    monkeypatch.setattr(costs_cache, "_path", lambda: tmp_path / "costs.json")
    with engine(tiny_model, mode="ngram", draft_max=16) as first:
        first.generate(Request(prompt="abc", sampling=GREEDY, max_tokens=4))
        measured = first.costs.snapshot()
    assert set(measured) == {1, 2, 3, 4, 8, 16}  # up to the first size that reaches --draft-max
    with engine(tiny_model, mode="ngram", draft_max=16) as second:
        assert not second.policy.unmeasured(512, second.spec.draft_max)  # nothing to measure again
        assert set(second.costs.snapshot()) >= set(measured)
    with engine(tiny_model, mode="ngram", draft_max=4) as other_threads:
        assert not other_threads.policy.unmeasured(512, other_threads.spec.draft_max)  # same file, threads, KV type: same key
    with engine(tiny_model, mode="ngram", draft_max=40) as longer:
        longer.generate(Request(prompt="abc", sampling=GREEDY, max_tokens=4))
        assert {32, 64} <= set(longer.costs.snapshot())  # longer drafts: the missing sizes are timed
        # a request with a longer --draft-max (bench --sweep): timed on the idle slot,
        # which loses its cached prompt but not its correctness
        again = longer.generate(Request(prompt="abc", sampling=GREEDY, max_tokens=4,
                                        spec=replace(longer.spec, draft_max=100)))
        assert 128 in longer.costs.snapshot()
        assert again.usage.cached_tokens == 0
