"""Sampling transforms, on synthetic logits (no model needed)."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.engine.sampling import Sampler, apply_penalties, distribution
from localspec.types import SamplingParams


def logits_of(probs: list[float]) -> np.ndarray:
    return np.log(np.asarray(probs, dtype=np.float64)).astype(np.float32)


P = logits_of([0.4, 0.3, 0.15, 0.1, 0.05])


def params(**kw) -> SamplingParams:
    base = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    base.update(kw)
    return SamplingParams(**base)


def test_greedy_is_argmax():
    d = distribution(P, params(temperature=0.0))
    assert d.ids.tolist() == [0] and d.probs.tolist() == [1.0]


def test_plain_temperature_one_is_the_softmax():
    d = distribution(P, params())
    dense = d.dense(5)
    assert np.allclose(dense, [0.4, 0.3, 0.15, 0.1, 0.05], atol=1e-6)
    assert dense.sum() == pytest.approx(1.0)


def test_top_k_keeps_the_k_best():
    d = distribution(P, params(top_k=2))
    assert sorted(d.ids.tolist()) == [0, 1]
    assert d.prob(0) == pytest.approx(0.4 / 0.7)


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    assert sorted(distribution(P, params(top_p=0.7)).ids.tolist()) == [0, 1]
    assert sorted(distribution(P, params(top_p=0.71)).ids.tolist()) == [0, 1, 2]


def test_min_p_is_relative_to_the_best_token():
    # 0.4 * 0.3 = 0.12: keeps 0.4, 0.3 and 0.15
    assert sorted(distribution(P, params(min_p=0.3)).ids.tolist()) == [0, 1, 2]


def test_temperature_sharpens_and_flattens():
    cold = distribution(P, params(temperature=0.5)).dense(5)
    hot = distribution(P, params(temperature=2.0)).dense(5)
    assert cold[0] > 0.4 > hot[0]
    assert cold.sum() == pytest.approx(1.0) and hot.sum() == pytest.approx(1.0)


def test_transforms_are_measured_before_temperature():
    # llama.cpp's order: top-p on the untempered distribution, temperature last
    d = distribution(P, params(top_p=0.7, temperature=3.0))
    assert sorted(d.ids.tolist()) == [0, 1]


def test_repeat_penalty_divides_positive_and_multiplies_negative_logits():
    logits = np.array([2.0, -1.0, 0.5], dtype=np.float32)
    out = apply_penalties(logits, SamplingParams(repeat_penalty=2.0), [0, 1])
    assert out.tolist() == [1.0, -2.0, 0.5]
    assert logits.tolist() == [2.0, -1.0, 0.5]  # the input is untouched


def test_presence_and_frequency_penalties_count_occurrences():
    logits = np.zeros(3, dtype=np.float32)
    out = apply_penalties(
        logits, SamplingParams(presence_penalty=0.5, frequency_penalty=0.25), [1, 1, 2]
    )
    assert out.tolist() == pytest.approx([0.0, -1.0, -0.75])


def test_penalty_window_is_the_last_n_tokens():
    logits = np.array([1.0, 1.0], dtype=np.float32)
    out = apply_penalties(logits, SamplingParams(repeat_penalty=2.0, penalty_last_n=1), [0, 1])
    assert out.tolist() == [1.0, 0.5]


def test_greedy_after_penalty_changes_the_choice():
    logits = np.array([2.0, 1.5], dtype=np.float32)
    s = Sampler(SamplingParams(temperature=0.0, repeat_penalty=2.0), history=[0])
    assert s.sample(logits)[0] == 1


def test_same_seed_same_tokens_other_seed_other_tokens():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=1000).astype(np.float32)

    def draw(seed: int) -> list[int]:
        s = Sampler(params(seed=seed))
        out = []
        for _ in range(50):
            out.append(s.sample(logits)[0])
            s.accept(out[-1])
        return out

    assert draw(7) == draw(7)
    assert draw(7) != draw(8)


def test_samples_follow_the_distribution():
    s = Sampler(params(seed=3))
    drawn = []
    for _ in range(20000):
        drawn.append(s.sample(P)[0])
        s.accept(drawn[-1])
    counts = np.bincount(drawn, minlength=5)
    expected = np.array([0.4, 0.3, 0.15, 0.1, 0.05]) * 20000
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 18.47  # 4 degrees of freedom, false alarm rate 0.001


@pytest.mark.parametrize("top_p", [0.5, 0.9, 0.999])
def test_top_p_over_a_large_vocabulary_matches_a_full_sort(top_p: float):
    rng = np.random.default_rng(1)
    logits = (rng.normal(size=50_000) * 2).astype(np.float32)
    d = distribution(logits, params(top_p=top_p))
    order = np.argsort(-logits.astype(np.float64), kind="stable")
    p = np.exp(logits[order].astype(np.float64) - logits.max())
    p /= p.sum()
    n = int(np.searchsorted(np.cumsum(p), top_p)) + 1
    assert sorted(d.ids.tolist()) == sorted(order[:n].tolist())
    assert d.probs.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("scale", [0.05, 1.0, 5.0, 40.0])
def test_top_k_equals_a_full_sort_ties_to_the_lower_id(scale: float):
    """The k best are looked for near the best logit first (a cheap comparison, not a
    partition of the vocabulary): the same ids in the same order as a full sort by
    (-logit, id), flat and peaked distributions, ties at the k-th included."""
    from localspec.engine.sampling import _top_ids

    rng = np.random.default_rng(7)
    for trial in range(300):
        n, k = int(rng.integers(50, 5000)), int(rng.integers(1, 600))
        logits = (rng.standard_normal(n) * scale).astype(np.float32)
        if trial % 2:
            logits = np.round(logits)  # many exact ties
        expected = np.lexsort((np.arange(n), -logits))[: min(k, n)]
        assert np.array_equal(_top_ids(logits, k), expected)
