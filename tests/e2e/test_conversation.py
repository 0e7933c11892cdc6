"""localspec.Conversation on the tiny model: the cached prefix is reused turn to turn (in
tokens), the oldest turns go when the context is full, answers cut short are kept, and
a saved conversation loads back to the same next answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localspec.conversation import Conversation
from localspec.engine import Engine, EngineConfig
from localspec.errors import LocalspecError
from localspec.types import FinishReason, SamplingParams

GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def engine(tiny_model: Path):
    with Engine(tiny_model, EngineConfig(n_ctx=256, n_slots=1)) as e:
        yield e


def _two_turns(engine: Engine):
    chat = Conversation(engine, system="Be brief.", sampling=GREEDY, max_tokens=12, spec="off")
    first = chat.say("hello there").wait()
    second = chat.say("and again").wait()
    chat.settle()
    assert [t.role for t in chat.turns] == ["user", "assistant", "user", "assistant"]
    assert chat.turns[1].content == first.text and chat.turns[3].content == second.text
    return first, second


def test_each_turn_reuses_the_cached_prompt(engine: Engine):
    """The random tiny model writes bytes that are not UTF-8 (its answer does not
    tokenize back to itself), so here the earlier prompt is what is reused."""
    first, second = _two_turns(engine)
    assert second.usage.cached_tokens >= first.usage.prompt_tokens - 1


@pytest.mark.smollm
def test_each_turn_prefills_only_its_own_tokens(smollm2: Path):
    with Engine(smollm2, EngineConfig(n_ctx=512, n_slots=1)) as e:
        first, second = _two_turns(e)
    history = first.usage.prompt_tokens + first.usage.completion_tokens
    assert second.usage.cached_tokens >= history - 2  # the first turn and its answer
    assert second.usage.prompt_tokens - second.usage.cached_tokens <= second.usage.prompt_tokens - history + 2


def test_the_oldest_turns_go_when_the_context_is_full(engine: Engine):
    notes: list[str] = []
    chat = Conversation(engine, system="S", sampling=GREEDY, max_tokens=20, spec="off", note=notes.append)
    for i in range(12):
        result = chat.say(f"message number {i} " + "word " * 12).wait()
        assert result.finish_reason is not FinishReason.ERROR, result.error
    chat.settle()
    assert notes and "dropped the oldest" in notes[0]
    assert chat.turns[0].role == "user" and chat.turns[-1].content == result.text
    assert chat.messages()[0].content == "S"  # the system prompt stays
    assert "message number 11" in chat.turns[-2].content and "message number 0 " not in chat.turns[0].content
    with pytest.raises(LocalspecError, match="context holds 256"):
        chat.say("word " * 400)
    assert "message number 11" in chat.turns[-2].content  # a refused message leaves the history as it was


def test_a_cancelled_answer_is_kept_marked_interrupted(engine: Engine):
    chat = Conversation(engine, sampling=GREEDY, max_tokens=200, spec="off")
    stream = chat.say("go on and on")
    for n, _event in enumerate(stream, 1):
        if n == 3:
            break
    chat.cancel()
    assert chat.last.finish_reason is FinishReason.CANCELLED
    assert chat.turns[-1].interrupted and chat.turns[-1].content == chat.last.text
    assert chat.say("next").wait().usage.completion_tokens > 0


def test_saved_and_loaded_it_gives_the_same_next_answer(engine: Engine, tmp_path: Path):
    chat = Conversation(engine, system="Sys", sampling=GREEDY, max_tokens=10, spec="off")
    chat.say("one").wait()
    chat.say("two").wait()
    chat.save(tmp_path / "c.json", {"temperature": 0.0})
    want = chat.say("three").wait().text
    other = Conversation(engine)
    assert other.load(tmp_path / "c.json") == {"temperature": 0.0}
    assert [(t.role, t.content) for t in other.turns] == [(t.role, t.content) for t in chat.turns[:4]]
    assert other.system == "Sys" and other.sampling == GREEDY and other.max_tokens == 10
    assert other.say("three").wait().text == want
    (tmp_path / "bad.json").write_text(json.dumps({"messages": "no"}))
    with pytest.raises(LocalspecError, match="is not a saved conversation"):
        other.load(tmp_path / "bad.json")
    with pytest.raises(LocalspecError, match="Cannot read"):
        other.load(tmp_path / "missing.json")
