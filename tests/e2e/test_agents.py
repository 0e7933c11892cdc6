"""Serving agents: tool calls through chat completions, the Responses API and the Messages
API, with the official ``openai`` and ``anthropic`` SDKs against a live ``localspec serve``
on Qwen2.5-Coder-0.5B (whose template supports tools); greedy, so each answer is one
the test can check."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import openai
import pytest

from .test_serve import Server

anthropic = pytest.importorskip("anthropic")

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city.",
                                           "parameters": CITY}},
         {"type": "function", "function": {"name": "get_time", "description": "Get the local time in a city.",
                                           "parameters": CITY}}]
WEATHER = [{"role": "user", "content": "What's the weather in Paris?"}]
BOTH = [{"role": "user", "content": "What is the weather and the local time in Tokyo?"}]
GREEDY = {"temperature": 0, "max_tokens": 200}


@pytest.fixture(scope="module")
def server(qwen_05b: Path) -> Iterator[Server]:
    srv = Server(qwen_05b, "--slots", "2", "--ctx-size", "2048", "--alias", "qwen")
    try:
        srv.wait_ready(180)
        yield srv
    finally:
        srv.stop()


def calls_of(message) -> list[tuple[str, dict]]:
    return [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or ()]


def test_a_tool_round_trip_streaming_and_not(server: Server):
    c = server.client()
    first = c.chat.completions.create(model="qwen", messages=WEATHER, tools=TOOLS, tool_choice="required",
                                      parallel_tool_calls=False, **GREEDY)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [(name, args)] = calls_of(choice.message)
    assert name in ("get_weather", "get_time")
    jsonschema.validate(args, CITY)
    call = choice.message.tool_calls[0]
    assert call.id.startswith("call_") and call.type == "function"

    stream = c.chat.completions.create(model="qwen", messages=WEATHER, tools=TOOLS, tool_choice="required",
                                       parallel_tool_calls=False, stream=True, **GREEDY)
    pieces, names, ids, finish = [], [], set(), None
    for chunk in stream:
        delta = chunk.choices[0].delta
        for tc in delta.tool_calls or ():
            assert tc.index == 0
            if tc.function.name:
                names.append(tc.function.name)
                ids.add(tc.id)
            pieces.append(tc.function.arguments or "")
        assert not delta.content
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and names == [name] and len(ids) == 1
    assert len([p for p in pieces if p]) > 1  # the arguments came in pieces, as they were written
    assert json.loads("".join(pieces)) == args

    history = WEATHER + [choice.message.model_dump(exclude_none=True),
                         {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temp_c": 21, "sky": "sunny"})}]
    answer = c.chat.completions.create(model="qwen", messages=history, tools=TOOLS, tool_choice="none", **GREEDY)
    text = answer.choices[0].message
    assert answer.choices[0].finish_reason == "stop" and text.tool_calls is None
    assert "21" in text.content  # the tool's result reached the model (its template renders it)


def test_parallel_calls_and_their_limit(server: Server):
    c = server.client()
    both = c.chat.completions.create(model="qwen", messages=BOTH, tools=TOOLS, tool_choice="required", **GREEDY)
    found = calls_of(both.choices[0].message)
    assert sorted(name for name, _ in found) == ["get_time", "get_weather"] and all(a == {"city": "Tokyo"} for _, a in found)
    assert both.choices[0].finish_reason == "tool_calls"
    assert both.usage.completion_tokens < 150  # a call repeating an earlier one ended the answer
    one = c.chat.completions.create(model="qwen", messages=BOTH, tools=TOOLS, tool_choice="required",
                                    parallel_tool_calls=False, **GREEDY)
    assert len(calls_of(one.choices[0].message)) == 1


def test_a_named_choice_and_none(server: Server):
    c = server.client()
    named = c.chat.completions.create(model="qwen", messages=WEATHER, tools=TOOLS, **GREEDY,
                                      tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert [n for n, _ in calls_of(named.choices[0].message)] == ["get_time"]
    none = c.chat.completions.create(model="qwen", messages=WEATHER, tools=TOOLS, tool_choice="none", **GREEDY)
    assert none.choices[0].message.tool_calls is None and none.choices[0].message.content
    assert none.choices[0].finish_reason == "stop"


def test_auto_calls_or_answers_and_nothing_is_lost(server: Server):
    """Under auto the 0.5B model calls the tool for the weather (a bare JSON call, held to
    the schema from its first brace). Asked for code, it answers with a fenced call of a
    function nobody offered: that comes back whole, as text."""
    c = server.client()
    auto = c.chat.completions.create(model="qwen", messages=WEATHER, tools=TOOLS, **GREEDY)
    assert auto.choices[0].finish_reason == "tool_calls"
    for name, args in calls_of(auto.choices[0].message):
        jsonschema.validate(args, CITY)
    text = c.chat.completions.create(model="qwen", tools=TOOLS, **GREEDY,
                                     messages=[{"role": "user", "content": "Write a Python function that adds two numbers."}])
    message = text.choices[0].message
    assert message.tool_calls is None and text.choices[0].finish_reason == "stop"
    assert message.content.startswith("```json\n{") and '"add_numbers"' in message.content


def test_the_responses_api(server: Server):
    c = server.client()
    FT = [{"type": "function", **t["function"]} for t in TOOLS]
    text = c.responses.create(model="qwen", input="Say hello in three words.", instructions="Be brief.", temperature=0,
                              max_output_tokens=20)
    assert text.status == "completed" and text.output_text and text.usage.output_tokens > 0
    with c.responses.stream(model="qwen", input="Say hello in three words.", instructions="Be brief.", temperature=0,
                            max_output_tokens=20) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == text.output_text

    called = c.responses.create(model="qwen", input=WEATHER, tools=FT, tool_choice="required",
                                parallel_tool_calls=False, temperature=0, max_output_tokens=100)
    [fc] = [item for item in called.output if item.type == "function_call"]
    jsonschema.validate(json.loads(fc.arguments), CITY)
    with c.responses.stream(model="qwen", input=WEATHER, tools=FT, tool_choice="required", parallel_tool_calls=False,
                            temperature=0, max_output_tokens=100) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.delta" in kinds and kinds[-1] == "response.completed"
    assert [(i.name, i.arguments) for i in final.output if i.type == "function_call"] == [(fc.name, fc.arguments)]

    back = c.responses.create(model="qwen", tools=FT, tool_choice="none", temperature=0, max_output_tokens=60, input=[
        *WEATHER, {"type": "function_call", "call_id": fc.call_id, "name": fc.name, "arguments": fc.arguments},
        {"type": "function_call_output", "call_id": fc.call_id, "output": "21 C and sunny"}])
    assert back.status == "completed" and "21" in back.output_text

    person = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"]}
    shaped = c.responses.create(model="qwen", input="Give a person named Ann, aged 30.", temperature=0, max_output_tokens=60,
                                text={"format": {"type": "json_schema", "name": "person", "schema": person}})
    jsonschema.validate(json.loads(shaped.output_text), person)

    short = c.responses.create(model="qwen", input="Count from one to fifty in words.", temperature=0, max_output_tokens=5)
    assert short.status == "incomplete" and short.incomplete_details.reason == "max_output_tokens"
    with pytest.raises(openai.BadRequestError) as stateful:
        c.responses.create(model="qwen", input="hi", previous_response_id="resp_123")
    assert stateful.value.body["param"] == "previous_response_id"


@pytest.mark.parametrize("body,param", [
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content"),
    ({"input": [{"type": "function_call", "name": "f"}]}, "input[0]"),
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": "hi", "tool_choice": "required"}, "tool_choice"),
    ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format"),
    ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": 5}, "input"),
])
def test_bad_responses_requests_are_400s_naming_the_field(server: Server, body, param):
    status, answer = server.post("/v1/responses", {"model": "qwen", **body})
    assert status == 400 and answer["error"]["param"] == param, answer
    status, ok = server.post("/v1/responses", {"model": "qwen", "input": "hi", "temperature": 0, "max_output_tokens": 2})
    assert status == 200 and ok["usage"]["output_tokens"] == 2


def test_the_messages_api_tool_round_trip(server: Server):
    a = anthropic.Anthropic(base_url=server.url, api_key="none", max_retries=0, timeout=120)
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"], "input_schema": CITY}
             for t in TOOLS]
    ask = {"model": "qwen", "max_tokens": 100, "tools": tools, "temperature": 0, "messages": WEATHER,
           "tool_choice": {"type": "any", "disable_parallel_tool_use": True}}
    msg = a.messages.create(**ask)
    [use] = [b for b in msg.content if b.type == "tool_use"]
    assert msg.stop_reason == "tool_use" and use.id.startswith("toolu_")
    jsonschema.validate(use.input, CITY)
    with a.messages.stream(**ask) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_message()
    assert "content_block_delta" in kinds and final.stop_reason == "tool_use"
    assert [(b.name, b.input) for b in final.content if b.type == "tool_use"] == [(use.name, use.input)]
    back = a.messages.create(model="qwen", max_tokens=60, tools=tools, tool_choice={"type": "none"}, temperature=0,
                             messages=[*WEATHER, {"role": "assistant", "content": [use.model_dump()]},
                                       {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                                     "content": "21 C, sunny"}]}])
    assert back.stop_reason == "end_turn" and "21" in back.content[0].text


THINK = r'root ::= "<think>" [a-z]{3,6} (" " [a-z]{3,6}){2,4} "</think>" [A-Za-z]{3,6} (" " [a-z]{3,6}){1,3} "."'
ASK = {"messages": [{"role": "user", "content": "What is two plus two?"}], "max_tokens": 80, "temperature": 0,
       "grammar": THINK}


@pytest.mark.parametrize("fmt", ["deepseek", "none"])
def test_reasoning_content_splits_off_the_think_block(smollm2: Path, fmt: str):
    """SmolLM2 does not think, so a grammar makes it write a <think> block; --reasoning-format
    deepseek moves the block to reasoning_content (whole and streamed, and in the Responses
    and Messages APIs), none leaves it in the content."""
    srv = Server(smollm2, "--slots", "1", "--ctx-size", "512", "--alias", "smol", "--reasoning-format", fmt)
    try:
        srv.wait_ready()
        status, whole = srv.post("/v1/chat/completions", ASK)
        assert status == 200, whole
        message = whole["choices"][0]["message"]
        if fmt == "none":
            assert message["content"].startswith("<think>") and "reasoning_content" not in message
            return
        thought, said = message["reasoning_content"], message["content"]
        assert thought and "<think>" not in thought and said.endswith(".") and "think>" not in said
        c = srv.client()
        parts = {"reasoning_content": "", "content": ""}
        for chunk in c.chat.completions.create(model="smol", stream=True, extra_body={"grammar": THINK},
                                               **{k: v for k, v in ASK.items() if k != "grammar"}):
            delta = chunk.choices[0].delta.model_dump()
            for key in parts:
                parts[key] += delta.get(key) or ""
        assert parts["reasoning_content"].strip() == thought and parts["content"].strip() == said
        response = c.responses.create(model="smol", input=ASK["messages"], max_output_tokens=80, temperature=0,
                                      extra_body={"grammar": THINK})
        kinds = [item.type for item in response.output]
        assert kinds == ["reasoning", "message"] and response.output_text == said
        assert response.output[0].content[0].text == thought
        a = anthropic.Anthropic(base_url=srv.url, api_key="none", max_retries=0, timeout=60)
        msg = a.messages.create(model="smol", max_tokens=80, temperature=0, messages=ASK["messages"],
                                extra_body={"grammar": THINK})
        assert [b.type for b in msg.content] == ["thinking", "text"] and msg.content[0].thinking == thought
    finally:
        srv.stop()
