"""The Anthropic Messages API (`POST /v1/messages`) through the official `anthropic` SDK,
against a live `localspec serve` on the tiny model: text, streaming, the same text as chat
completions, errors in Anthropic's shape, and a server that goes on after bad requests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .test_serve import Server

anthropic = pytest.importorskip("anthropic")
MSG = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def server(tiny_model: Path) -> Iterator[Server]:
    srv = Server(tiny_model, "--slots", "2", "--ctx-size", "256", "--alias", "tiny")
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def client(server: Server, **kw) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=kw.pop("api_key", "none"), max_retries=0, timeout=60, **kw)


def test_text_streaming_and_chat_completions_agree(server: Server):
    c = client(server)
    msg = c.messages.create(model="tiny", max_tokens=20, messages=MSG, temperature=0, system="Be brief.")
    assert msg.type == "message" and msg.role == "assistant" and msg.stop_reason == "max_tokens"
    assert msg.usage.output_tokens == 20 and msg.usage.input_tokens > 0
    text = msg.content[0].text
    with c.messages.stream(model="tiny", max_tokens=20, messages=MSG, temperature=0, system="Be brief.") as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == text and final.stop_reason == "max_tokens" and final.usage.output_tokens == 20
    status, chat = server.post("/v1/chat/completions", {"model": "tiny", "max_tokens": 20, "temperature": 0,
                                                        "messages": [{"role": "system", "content": "Be brief."}, *MSG]})
    assert status == 200 and chat["choices"][0]["message"]["content"] == text  # one engine request, either API
    blocks = c.messages.create(model="tiny", max_tokens=20, temperature=0, system=[{"type": "text", "text": "Be brief."}],
                               messages=[{"role": "user", "content": [{"type": "text", "text": "hello there"}]}])
    assert blocks.content[0].text == text


def test_stop_sequences(server: Server):
    c = client(server)
    free = c.messages.create(model="tiny", max_tokens=30, messages=MSG, temperature=0).content[0].text
    stop = free[5:8]
    assert len(stop) == 3
    msg = c.messages.create(model="tiny", max_tokens=30, messages=MSG, temperature=0, stop_sequences=[stop])
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == stop and stop not in msg.content[0].text


@pytest.mark.parametrize("body,words", [
    ({"max_tokens": 10}, "messages"),
    ({"messages": MSG}, "max_tokens"),
    ({"max_tokens": 0, "messages": MSG}, "max_tokens"),
    ({"max_tokens": 10, "messages": MSG, "temperature": 1.5}, "temperature"),
    ({"max_tokens": 10, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "image"),
    ({"max_tokens": 10, "messages": MSG, "tools": [{"name": "f"}]}, "input_schema"),
    ({"max_tokens": 10, "messages": MSG, "tools": [{"name": "f b", "input_schema": {"type": "object"}}]}, "name"),
    ({"max_tokens": 10, "messages": MSG, "tools": [{"name": "f", "input_schema": {"type": "string"}}]}, "object"),
    ({"max_tokens": 10, "messages": MSG, "tools": [{"type": "bash_20250124", "name": "bash"}]}, "tools"),
    ({"max_tokens": 10, "messages": MSG, "tool_choice": {"type": "any"}}, "no tools"),
    ({"max_tokens": 10, "messages": MSG, "tools": [{"name": "f", "input_schema": {"type": "object"}}],
      "tool_choice": {"type": "tool", "name": "g"}}, "'g'"),
    ({"max_tokens": 10, "messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}, "tool_use_id"),
    ({"max_tokens": 10, "messages": [{"role": "assistant", "content": [{"type": "tool_use", "name": "f"}]}]}, "tool_use"),
    ({"max_tokens": 10, "messages": [{"role": "system", "content": "x"}]}, "role"),
    ({"max_tokens": 10, "messages": MSG, "model": "other"}, "does not exist"),
])
def test_bad_requests_are_4xx_in_anthropics_shape(server: Server, body, words):
    status, answer = server.post("/v1/messages", body)
    assert 400 <= status < 500, answer
    assert answer["type"] == "error" and answer["error"]["type"] in ("invalid_request_error", "not_found_error")
    assert words in answer["error"]["message"]
    assert client(server).messages.create(model="tiny", max_tokens=3, temperature=0, messages=MSG).usage.output_tokens == 3


def test_the_sdk_raises_its_own_errors(server: Server):
    with pytest.raises(anthropic.BadRequestError) as bad:
        client(server).messages.create(model="tiny", max_tokens=10, messages=MSG, temperature=7)
    assert bad.value.body["error"]["type"] == "invalid_request_error"


def test_an_api_key_is_asked_in_anthropics_shape(tiny_model: Path):
    srv = Server(tiny_model, "--slots", "1", "--ctx-size", "128", "--alias", "tiny", "--api-key", "sekret")
    try:
        srv.wait_ready()
        with pytest.raises(anthropic.AuthenticationError) as denied:
            client(srv, api_key="wrong").messages.create(model="tiny", max_tokens=3, messages=MSG)
        assert denied.value.body["error"]["type"] == "authentication_error"
        assert client(srv, api_key="sekret").messages.create(model="tiny", max_tokens=3, messages=MSG).content
    finally:
        srv.stop()
