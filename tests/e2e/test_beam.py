"""Beam search on the tiny f32 model: the same answer as an exhaustive search under the
same scoring, beam 1 is greedy, and the KV cache holds nothing after it."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from localspec.engine import Engine, EngineConfig, backend
from localspec.errors import InvalidRequest
from localspec.types import FinishReason, Request, SamplingParams

PROMPT = "abc abc"


def _logprobs(model: backend.Model, prompt: list[int], allowed: list[int]) -> dict[tuple[int, ...], np.ndarray]:
    """The log-probabilities over ``allowed`` after the prompt plus every prefix of up to
    two allowed tokens (others banned), each decoded from scratch."""
    ctx = backend.Context(model, n_ctx=64)
    batch = backend.Batch(64)
    out = {}
    try:
        for n in range(3):
            for prefix in itertools.product(allowed, repeat=n):
                ctx.seq_rm(0, -1, -1)
                batch.clear()
                seq = prompt + list(prefix)
                for i, t in enumerate(seq):
                    batch.add(t, i, 0, i == len(seq) - 1)
                ctx.decode(batch)
                x = np.array(ctx.logits(batch.n - 1), dtype=np.float64)[allowed]
                out[prefix] = x - (x.max() + math.log(np.exp(x - x.max()).sum()))
    finally:
        batch.close()
        ctx.close()
    return out


def test_beam_search_equals_an_exhaustive_search(tiny_model: Path):
    """Six tokens allowed (a logit bias bans the rest), three tokens long: 36 beams keep
    every prefix, so the best beams must be the best of all 216 sequences."""
    with Engine(tiny_model, EngineConfig(n_ctx=64, n_slots=36, n_batch=64)) as e:
        prompt = e.model.tokenize(PROMPT, add_special=True, parse_special=True)
        allowed = [t for t in range(60, 200) if not e.model.is_eog(t)][:6]
        bias = {t: -100.0 for t in range(e.model.n_vocab) if t not in allowed}
        got = e.generate(Request(prompt=PROMPT, max_tokens=3, beams=36, sampling=SamplingParams(logit_bias=bias)))
        lp = _logprobs(e.model, prompt, allowed)
        assert all(e.ctx.seq_pos_max(seq) == -1 for seq in range(36))  # no sequence left in the cache
    index = {t: i for i, t in enumerate(allowed)}
    scores = {seq: sum(lp[seq[:i]][index[seq[i]]] for i in range(3)) for seq in itertools.product(allowed, repeat=3)}
    best = sorted(scores, key=lambda s: -scores[s])[:36]
    assert [h.token_ids for h in got.beams] == best
    for h in got.beams:
        assert h.logprob == pytest.approx(scores[h.token_ids], abs=1e-4)
        assert h.score == pytest.approx(h.logprob / 3, abs=1e-4) and h.finish_reason is FinishReason.LENGTH
    assert got.text == got.beams[0].text and got.usage.completion_tokens == 3


def test_one_beam_is_greedy_and_beams_are_deterministic(tiny_model: Path):
    with Engine(tiny_model, EngineConfig(n_ctx=128, n_slots=4)) as e:
        greedy = e.submit(Request(prompt=PROMPT, max_tokens=12, sampling=SamplingParams(temperature=0), spec="off"))
        ids = [ev.token_id for ev in greedy if ev.token_id >= 0]
        one = e.generate(Request(prompt=PROMPT, max_tokens=12, beams=1))
        assert list(one.beams[0].token_ids) == ids and one.text == greedy.result.text
        four = [e.generate(Request(prompt=PROMPT, max_tokens=12, beams=4, length_penalty=0.5)) for _ in range(2)]
        assert four[0].beams == four[1].beams and len(four[0].beams) == 4
        assert [h.score for h in four[0].beams] == sorted((h.score for h in four[0].beams), reverse=True)
        assert four[0].beams[0].score >= one.beams[0].logprob / 12 ** 0.5 - 1e-9  # at least as good as greedy
        assert all(e.ctx.seq_pos_max(seq) == -1 for seq in range(4))
        # the engine goes on with ordinary requests after a beam search
        assert e.generate(Request(prompt=PROMPT, max_tokens=4, sampling=SamplingParams(temperature=0))).text


@pytest.mark.parametrize("kw,words", [
    ({"beams": 0}, "beams must be at least 1"),
    ({"beams": 9}, "beams must be at most the number of slots"),
    ({"beams": 2, "stop": ["x"]}, "no constraint and no stop strings"),
    ({"beams": 2, "length_penalty": float("nan")}, "length_penalty must be a number"),
])
def test_bad_beam_settings_are_refused(tiny_engine: Engine, kw, words):
    with pytest.raises(InvalidRequest, match=words):
        tiny_engine.submit(Request(prompt=PROMPT, **kw))


def test_run_beams_cli(tiny_model: Path):
    import json
    import subprocess
    import sys

    cli = [sys.executable, "-m", "localspec", "run", str(tiny_model), "--raw", PROMPT, "-n", "8", "-c", "128"]
    got = subprocess.run(cli + ["--beams", "3", "--json"], capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    record = json.loads(got.stdout)
    assert len(record["beams"]) == 3 and record["text"] == record["beams"][0]["text"]
    assert [b["score"] for b in record["beams"]] == sorted((b["score"] for b in record["beams"]), reverse=True)
    greedy = subprocess.run(cli + ["--temperature", "0", "--json"], capture_output=True, text=True, timeout=120)
    one = subprocess.run(cli + ["--beams", "1", "--json"], capture_output=True, text=True, timeout=120)
    assert json.loads(one.stdout)["text"] == json.loads(greedy.stdout)["text"]
    both = subprocess.run(cli + ["--beams", "2", "--n", "2"], capture_output=True, text=True, timeout=120)
    assert both.returncode == 2 and "--n or --beams" in both.stderr
