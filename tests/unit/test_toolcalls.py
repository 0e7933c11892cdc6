"""Tool-call parsing per template family, on recorded model outputs and the documented
forms, including malformed ones (which come back as text)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localspec import toolcalls
from localspec.toolcalls import Parsed, ToolCall, family, parse
from localspec.types import Tool

NAMES = {"get_weather", "get_time"}
RECORDED = json.loads((Path(__file__).parent / "data" / "toolcalls-qwen2.5-coder-0.5b.json").read_text())["outputs"]


def call(name: str, **args) -> ToolCall:
    return ToolCall(name, json.dumps(args))


def test_recorded_qwen_outputs():
    """Qwen2.5-Coder-0.5B answers with bare JSON (no <tool_call> tags) or a fenced block;
    and calls a function nobody offered when asked to say hello: that stays text."""
    assert parse(RECORDED["What's the weather in Paris?"], "hermes", NAMES) == Parsed("", (call("get_weather", city="Paris"),))
    fenced = RECORDED["What is the weather and the local time in Tokyo and in Oslo?"]
    assert parse(fenced, "hermes", NAMES).calls == (call("get_weather", city="Tokyo"),)
    hello = RECORDED["Say hello."]
    assert parse(hello, "hermes", NAMES) == Parsed(hello)


@pytest.mark.parametrize("fam,text,content,calls", [
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>', "",
     [call("get_weather", city="Oslo")]),
    ("hermes", 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n'
               '<tool_call>\n{"name": "get_time", "arguments": {"city": "Oslo"}}\n</tool_call>', "Let me check.",
     [call("get_weather", city="Oslo"), call("get_time", city="Oslo")]),
    ("hermes", '<tool_call>{"name": "get_time", "arguments": "{\\"city\\": \\"Rome\\"}"}', "",  # unclosed at EOS
     [call("get_time", city="Rome")]),
    ("llama3", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Lima"}}', "", [call("get_weather", city="Lima")]),
    ("llama3", '{"name": "get_weather", "parameters": {"city": "Lima"}}', "", [call("get_weather", city="Lima")]),
    ("llama3", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "A"}}; {"name": "get_time", "parameters": '
               '{"city": "B"}}', "", [call("get_weather", city="A"), call("get_time", city="B")]),
    ("mistral", '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Nice"}}]', "", [call("get_weather", city="Nice")]),
    ("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Nice"}[TOOL_CALLS]get_time[ARGS]{"city": "Nice"}', "",
     [call("get_weather", city="Nice"), call("get_time", city="Nice")]),
    ("generic", '{"tool_calls": [{"name": "get_time", "arguments": {"city": "Kyiv"}}]}', "", [call("get_time", city="Kyiv")]),
    ("generic", '[{"name": "get_time", "arguments": {"city": "X"}}, {"name": "get_weather", "arguments": {}}]', "",
     [call("get_time", city="X"), call("get_weather")]),
    ("generic", '{"type": "function", "function": {"name": "get_time", "arguments": "{\\"city\\": \\"Y\\"}"}}', "",
     [call("get_time", city="Y")]),
])
def test_each_family_s_syntax(fam, text, content, calls):
    assert parse(text, fam, NAMES) == Parsed(content, tuple(calls))


@pytest.mark.parametrize("fam,text", [
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"</tool_call>'),  # bad JSON
    ("hermes", '<tool_call>{"arguments": {"city": "Oslo"}}</tool_call>'),  # no name
    ("hermes", '<tool_call>{"name": "launch_rockets", "arguments": {}}</tool_call>'),  # not offered
    ("llama3", '<|python_tag|>{"name": "get_weather", "parameters": [1, 2]}'),  # arguments not an object
    ("mistral", '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": '),  # cut off
    ("mistral", '[TOOL_CALLS]get_weather[ARGS]not json'),
    ("generic", 'The weather in Paris is {"temp": 20}.'),  # prose, not a call
    ("generic", '{"name": "get_weather", "arguments": {"city": "Paris"}} and more'),
    ("generic", ""),
    ("generic", "[" * 5000),  # deeply nested: no RecursionError
])
def test_a_botched_call_is_text(fam, text):
    assert parse(text, fam, NAMES) == Parsed(text)


def test_plain_text_is_text_in_every_family():
    for fam in ("hermes", "llama3", "mistral", "generic"):
        assert parse("Paris is sunny today.", fam, NAMES) == Parsed("Paris is sunny today.")


def test_the_family_comes_from_the_template(qwen_05b: Path):
    from localspec.engine.backend import Model

    model = Model(qwen_05b)
    try:
        assert family(model.chat_template) == "hermes"
    finally:
        model.close()
    assert family("{% if tools %}[AVAILABLE_TOOLS]...[TOOL_CALLS]{% endif %}") == "mistral"
    assert family("<|start_header_id|>ipython<|end_header_id|> <|python_tag|>") == "llama3"
    assert family("{{ messages }}") == family(None) == "generic"


@pytest.fixture(scope="module")
def qwen(qwen_05b: Path):
    from localspec.engine.backend import Model
    from localspec.engine.constraint import Constraints

    model = Model(qwen_05b)
    yield model, Constraints(model)
    model.close()


TOOLS = (Tool("get_weather", "w", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
         Tool("get_time", "t", {"type": "object", "properties": {"city": {"type": "string"}, "utc": {"type": "number"}},
                               "required": ["city"]}))
TAGGED = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
BARE = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


@pytest.mark.parametrize("fam,choice,parallel,text,whole", [
    ("hermes", "auto", True, "Hello there", True),
    ("hermes", "auto", True, "Sure.\n" + TAGGED, True),
    ("hermes", "auto", True, TAGGED + "\n" + TAGGED, True),
    ("hermes", "auto", True, BARE, True),  # Qwen2.5-Coder-0.5B's own habit
    ("hermes", "auto", True, "", True),
    ("hermes", "auto", True, '{"a": 1}', False),  # an opening brace is a call, held to the schema
    ("hermes", "auto", True, TAGGED.replace("Paris", "1").replace('"1"', "1"), False),  # city must be a string
    ("hermes", "auto", True, "ok <tool_call>", None),  # a call must follow its marker
    ("hermes", "required", False, TAGGED, True),
    ("hermes", "required", False, TAGGED + "\n" + TAGGED, False),
    ("hermes", "required", False, "Hi", False),
    ("hermes", "get_time", True, TAGGED, False),
    ("hermes", "get_time", True, TAGGED.replace("get_weather", "get_time"), True),
    ("generic", "auto", True, "[" + BARE + ", " + BARE + "]", True),
    ("generic", "auto", False, "[" + BARE + ", " + BARE + "]", False),
    ("llama3", "required", True, BARE.replace("arguments", "parameters"), True),
    ("mistral", "auto", True, "[TOOL_CALLS][" + BARE + "]", True),
])
def test_the_call_grammar_on_a_real_vocabulary(qwen, fam, choice, parallel, text, whole):
    """True: the grammar takes the whole text and may end there; False: it refuses a token
    of it; None: it takes it all but may not end there."""
    from llguidance import LLMatcher

    model, constraints = qwen
    grammar = LLMatcher.grammar_from_lark(toolcalls.grammar(TOOLS, choice, parallel, fam, constraints.literal))
    assert not LLMatcher.validate_grammar(grammar, model.guidance_tokenizer())
    matcher = LLMatcher(model.guidance_tokenizer(), grammar, log_level=0)
    ids = model.tokenize(text, add_special=False, parse_special=True)
    taken = matcher.validate_tokens(ids)
    if whole is False:
        assert taken < len(ids)
    else:
        assert taken == len(ids) and matcher.consume_tokens(ids)
        assert matcher.is_accepting() is bool(whole)


def test_qwens_tool_call_tags_are_special_tokens_to_the_grammar(qwen):
    _, constraints = qwen
    assert constraints.literal("<tool_call>").startswith("<[") and constraints.literal("</tool_call>").startswith("<[")
    assert constraints.literal("[TOOL_CALLS]") == '"[TOOL_CALLS]"'
