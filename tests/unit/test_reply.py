"""The reply parser: an answer split into reasoning, content and tool calls, the same
whether it arrives whole or a character at a time."""

from __future__ import annotations

import json

import pytest

from localspec.reply import Delta, Reply, ReplyParser, thinks
from localspec.types import ToolCall

NAMES = {"get_weather", "get_time"}
PARIS = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
OSLO = PARIS.replace("Paris", "Oslo")


def run(text: str, step: int, **kw) -> tuple[list[Delta], Reply]:
    parser = ReplyParser(**{"family": "hermes", "names": NAMES, **kw})
    deltas: list[Delta] = []
    for i in range(0, len(text), step):
        deltas += parser.feed(text[i:i + step])
    deltas += parser.close()
    return deltas, parser.reply


def joined(deltas: list[Delta]) -> dict:
    out = {"reasoning": "", "content": "", "calls": {}}
    for d in deltas:
        if d.kind == "call":
            name, args = out["calls"].get(d.index, (None, ""))
            out["calls"][d.index] = (d.name or name, args + d.text)
        else:
            out[d.kind] += d.text
    return out


CASES = [
    ("Hello there, friend.", {}, Reply("Hello there, friend.")),
    ("Sure.\n" + PARIS, {}, Reply("Sure.", calls=(ToolCall("get_weather", '{"city": "Paris"}'),))),
    (PARIS + "\n" + OSLO, {}, Reply("", calls=(ToolCall("get_weather", '{"city": "Paris"}'),
                                               ToolCall("get_weather", '{"city": "Oslo"}')))),
    ('{"name": "get_time", "arguments": {"city": "Rome"}}', {}, Reply("", calls=(ToolCall("get_time", '{"city": "Rome"}'),))),
    ('```json\n{"name": "get_time", "arguments": {"city": "Rome"}}\n```', {},
     Reply("", calls=(ToolCall("get_time", '{"city": "Rome"}'),))),
    ("```python\nprint(1)\n```", {}, Reply("```python\nprint(1)\n```")),
    ('{"name": "launch", "arguments": {}}', {}, Reply('{"name": "launch", "arguments": {}}')),  # not offered: text
    ('{"name": "get_time", "arguments": {"city": "Ro', {}, Reply('{"name": "get_time", "arguments": {"city": "Ro')),
    ("<think>Let me think.\nOK</think>\n\nIt is 4.", {"think": True}, Reply("It is 4.", "Let me think.\nOK")),
    ("Let me think.</think>It is 4.", {"think": True, "thinking": True}, Reply("It is 4.", "Let me think.")),
    ("<think>Hmm</think>" + PARIS, {"think": True}, Reply("", "Hmm", (ToolCall("get_weather", '{"city": "Paris"}'),))),
    ("<think>Hm</think>It is 4.", {}, Reply("<think>Hm</think>It is 4.")),  # not asked to split
    ("<thinking is fun", {"think": True}, Reply("<thinking is fun")),
    ("<think>cut off", {"think": True}, Reply("", "cut off")),
]


@pytest.mark.parametrize("text,kw,reply", CASES, ids=range(len(CASES)))
@pytest.mark.parametrize("step", [1, 3, 10_000])
def test_whole_or_in_pieces_the_same_reply(text, kw, reply, step):
    deltas, got = run(text, step, **kw)
    assert got == reply
    seen = joined(deltas)
    assert seen["reasoning"].strip() == reply.reasoning and seen["content"].strip() == reply.content
    if reply.calls:
        assert [(n, json.loads(a)) for n, a in seen["calls"].values()] == \
            [(c.name, json.loads(c.arguments)) for c in reply.calls]


def test_a_repeated_call_ends_the_answer_and_is_never_shown():
    text = PARIS + "\n" + OSLO + "\n" + PARIS.replace('{"name"', '{\n  "name"') + "\n" + OSLO
    for step in (1, 4, 10_000):
        parser = ReplyParser(family="hermes", names=NAMES)
        deltas = []
        for i in range(0, len(text), step):
            deltas += parser.feed(text[i:i + step])
            if parser.repeated:
                break
        deltas += parser.close()
        assert parser.repeated and len(parser.reply.calls) == 2
        assert sorted(joined(deltas)["calls"]) == [0, 1] and not joined(deltas)["content"]


def test_arguments_arrive_as_they_are_written():
    parser = ReplyParser(family="generic", names=NAMES)
    pieces = [d for ch in '{"name": "get_time", "arguments": {"city": "Rome"}}' for d in parser.feed(ch) if d.kind == "call"]
    assert pieces[0].name == "get_time" and len(pieces) > 5
    assert "".join(p.text for p in pieces) == '{"city": "Rome"}'


def test_content_that_may_begin_a_call_is_held_only_until_told_apart():
    parser = ReplyParser(family="hermes", names=NAMES)
    assert parser.feed("Let me <tool") == [Delta("content", "Let me ")]
    assert parser.feed("box> help") == [Delta("content", "<toolbox> help")]
    think = ReplyParser(think=True)
    assert think.feed("<thi") == [] and think.feed("s is") == [Delta("content", "<this is")]


def test_a_template_that_thinks():
    assert thinks("{% if x %}<think>\n{% endif %}") and not thinks("{{ messages }}") and not thinks(None)
