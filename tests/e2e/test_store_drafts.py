"""Drafting from earlier requests (the engine's store) through the real engine: a request
whose answer was written by an earlier one drafts it from there, with the same output
(an f32 model: exact); opting out, or another key, drafts nothing of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from localspec.engine import Engine, EngineConfig
from localspec.types import Message, Request, SamplingParams, SpecConfig

GREEDY = SamplingParams(temperature=0.0)
PROMPT = "Tell me a long story about a robot and its garden, with many details."


@pytest.fixture(scope="module")
def engine(tiny_model: Path):
    with Engine(tiny_model, EngineConfig(n_ctx=1024, spec=SpecConfig(mode="ngram"))) as e:
        yield e


def ask(engine, share: bool = True, key: str = ""):
    return engine.generate(Request(messages=[Message("user", PROMPT)], sampling=GREEDY, max_tokens=96, cache_prompt=False,
                                   spec=SpecConfig(mode="ngram", share=share), store_key=key))


def test_an_answer_written_before_is_drafted_from_the_store(engine):
    engine.keep_texts(0)
    alone = ask(engine)
    engine.keep_texts(4096)
    first = ask(engine)  # the store is empty: as alone
    again = ask(engine)  # its own answer is in the store now
    assert alone.text == first.text == again.text  # lossless, whatever was drafted
    assert again.spec.accepted > first.spec.accepted + 40 and again.spec.steps < first.spec.steps / 2
    opted_out = ask(engine, share=False)
    other_key = ask(engine, key="someone else")
    assert opted_out.text == other_key.text == alone.text
    assert opted_out.spec.accepted <= first.spec.accepted + 5 and other_key.spec.accepted <= first.spec.accepted + 5
    engine.keep_texts(0)
