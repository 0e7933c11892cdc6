"""``localspec serve`` as a real subprocess on a loopback port, driven with the official
``openai`` SDK and raw HTTP (tiny f32 models)."""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

CLI = [sys.executable, "-m", "localspec"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, model: Path | list[Path] | None, *args: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        models = [] if model is None else [str(m) for m in model] if isinstance(model, list) else [str(model)]
        self.proc = subprocess.Popen(
            CLI + ["serve", *models, "--port", str(self.port), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "LOCALSPEC_NO_COST_CACHE": "1", **(env or {})},
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.proc.stderr.read()
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError("the server did not become ready")

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None,
                timeout: float = 60) -> tuple[int, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
            resp = conn.getresponse()
            data = resp.read()
            try:
                return resp.status, json.loads(data)
            except ValueError:
                return resp.status, {"raw": data.decode("utf-8", "replace")}
        finally:
            conn.close()

    def get(self, path: str, **kw) -> tuple[int, dict]:
        return self.request("GET", path, **kw)

    def post(self, path: str, obj, **kw) -> tuple[int, dict]:
        body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        return self.request("POST", path, body, **kw)

    def client(self, **kw) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=kw.pop("api_key", "none"), max_retries=0, timeout=60, **kw)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=15)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


@pytest.fixture(scope="module")
def server(tiny_model: Path) -> Iterator[Server]:
    srv = Server(tiny_model, "--slots", "4", "--ctx-size", "256", "--alias", "tiny")
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


GREEDY = {"temperature": 0}
MSG = [{"role": "user", "content": "hello there"}]


def test_chat_non_streaming_and_streaming_agree(server: Server):
    c = server.client()
    full = c.chat.completions.create(model="tiny", messages=MSG, max_tokens=24, **GREEDY)
    assert full.object == "chat.completion" and full.choices[0].message.role == "assistant"
    assert full.choices[0].finish_reason == "length" and full.usage.completion_tokens == 24
    chunks = list(c.chat.completions.create(model="tiny", messages=MSG, max_tokens=24, stream=True,
                                            stream_options={"include_usage": True}, **GREEDY))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == full.choices[0].message.content and text
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 24


def test_completions_stop_and_logprobs(server: Server):
    c = server.client()
    full = c.completions.create(model="tiny", prompt="abc abc", max_tokens=30, **GREEDY)
    text = full.choices[0].text
    assert full.choices[0].finish_reason == "length" and len(text) > 6
    stop = text[4:7]
    cut = c.completions.create(model="tiny", prompt="abc abc", max_tokens=30, stop=[stop], **GREEDY)
    assert cut.choices[0].text == text[: text.index(stop)] and cut.choices[0].finish_reason == "stop"
    lp = c.completions.create(model="tiny", prompt="abc abc", max_tokens=5, logprobs=2, **GREEDY)
    assert len(lp.choices[0].logprobs.token_logprobs) == 5 and all(x <= 0 for x in lp.choices[0].logprobs.token_logprobs)
    got = lp.choices[0].logprobs
    # {text: logprob}: two ids may share a text (byte pieces of one character), so 1 or 2
    assert all(1 <= len(top) <= 2 and token in top for token, top in zip(got.tokens, got.top_logprobs))
    chat = c.chat.completions.create(model="tiny", messages=MSG, max_tokens=4, logprobs=True, top_logprobs=3, **GREEDY)
    entries = chat.choices[0].logprobs.content
    assert len(entries) == 4 and all(len(e.top_logprobs) == 3 for e in entries)
    assert entries[0].top_logprobs[0].logprob >= entries[0].top_logprobs[1].logprob


def test_seeded_sampling_reproduces_and_models_are_listed(server: Server):
    c = server.client()
    a, b = (c.chat.completions.create(model="tiny", messages=MSG, max_tokens=16, temperature=0.9, seed=7)
            for _ in range(2))
    assert a.choices[0].message.content == b.choices[0].message.content
    assert [m.id for m in c.models.list().data] == ["tiny"]


def test_the_extensions_say_what_speculation_did(server: Server):
    status, body = server.post("/v1/completions", {"prompt": "one two three one two three one two", "max_tokens": 20,
                                                   "temperature": 0, "speculative": {"mode": "ngram", "draft_max": 4}})
    assert status == 200
    assert set(body["speculative"]) == {"mode", "drafted", "accepted", "acceptance_rate"}
    assert body["timings"]["predicted_n"] == 20
    status, slots = server.get("/slots")
    assert status == 200 and len(slots) == 4 and {s["state"] for s in slots} == {"idle"}
    status, metrics = server.get("/metrics")
    assert status == 200 and "localspec_completion_tokens_total" in metrics["raw"]


def test_eight_concurrent_greedy_requests_on_four_slots_equal_each_alone(server: Server):
    c = server.client()
    prompts = [f"request number {i} says" for i in range(8)]

    def ask(p: str) -> str:
        return c.completions.create(model="tiny", prompt=p, max_tokens=32, **GREEDY).choices[0].text

    alone = [ask(p) for p in prompts]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        together = list(pool.map(ask, prompts))
    assert together == alone


def test_sdk_errors(server: Server):
    c = server.client()
    with pytest.raises(openai.BadRequestError) as bad:
        c.chat.completions.create(model="tiny", messages=MSG, temperature=3)
    assert bad.value.body["param"] == "temperature"
    with pytest.raises(openai.NotFoundError):
        c.chat.completions.create(model="gpt-9", messages=MSG)
    with pytest.raises(openai.BadRequestError, match="not supported"):
        c.chat.completions.create(model="tiny", messages=MSG, functions=[{"name": "f"}])
    with pytest.raises(openai.BadRequestError) as fmt:
        c.chat.completions.create(model="tiny", messages=MSG, response_format={"type": "xml"})
    assert fmt.value.body["param"] == "response_format.type"


DEEP: dict = {"type": "string"}
for _ in range(400):
    DEEP = {"type": "object", "properties": {"a": DEEP}}
WIDE = {"type": "object", "properties": {f"p{j}": {"type": "string"} for j in range(50)}}
BAD_BODIES = [
    (b"{not json", None),
    (b"[1, 2]", None),
    ({"messages": None}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": 123, "content": "hi"}]}, "messages[0].role"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "   "}]}, None),
    ({"messages": MSG, "temperature": -1}, "temperature"),
    ({"messages": MSG, "temperature": "hot"}, "temperature"),
    ({"messages": MSG, "top_p": 0}, "top_p"),
    ({"messages": MSG, "top_p": 1.5}, "top_p"),
    ({"messages": MSG, "max_tokens": 0}, "max_tokens"),
    ({"messages": MSG, "max_tokens": 10**9}, "max_tokens"),
    ({"messages": MSG, "n": 0}, "n"),
    ({"messages": MSG, "n": 9}, "n"),
    ({"messages": MSG, "logit_bias": {"999999999": 1}}, "logit_bias"),
    ({"messages": MSG, "logit_bias": {"5": 101}}, "logit_bias"),
    ({"messages": MSG, "logit_bias": {"x": 1}}, "logit_bias"),
    ({"messages": MSG, "stop": 7}, "stop"),
    ({"messages": MSG, "seed": 1.5}, "seed"),
    ({"messages": MSG, "stream": "yes"}, "stream"),
    ({"messages": MSG, "chat_template": "{{ 1 }}"}, "chat_template"),
    ({"messages": MSG, "top_logprobs": 50, "logprobs": True}, "top_logprobs"),
    ({"messages": MSG, "speculative": {"mode": "fast"}}, "speculative.mode"),
    ({"messages": MSG, "speculative": {"draft_max": 0}}, None),
    ({"messages": [{"role": "user", "content": "word " * 400}]}, "messages"),
    ({"messages": MSG, "tools": [{"type": "function", "function": {"name": "get weather"}}]}, "tools"),
    ({"messages": MSG, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]},
     "tools"),
    ({"messages": MSG, "tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "nonsense"}}}}}]}, "tools"),
    ({"messages": MSG, "tools": [{"type": "function", "function": {"name": "f"}}] * 2}, "tools"),
    ({"messages": MSG, "tools": [{"type": "retrieval"}]}, "tools[0].type"),
    ({"messages": MSG, "tool_choice": "required"}, "tool_choice"),
    ({"messages": MSG, "tool_choice": "sometimes"}, "tool_choice"),
    ({"messages": MSG, "tools": [{"type": "function", "function": {"name": "f"}}],
      "tool_choice": {"type": "function", "function": {"name": "g"}}}, "tool_choice"),
    ({"messages": MSG, "tools": [{"type": "function", "function": {"name": "f"}}], "grammar": "root ::= \"a\""},
     "tools"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f"}}]}]},
     "messages[0].tool_calls[0].function.arguments"),
    (b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", None),  # nests past Python's recursion limit
    ({"messages": MSG, "tools": [{"type": "function", "function": {"name": "f", "parameters": DEEP}}]}, "tools"),
    ({"messages": MSG, "tools": [{"type": "function", "function": {"name": f"f{i}", "parameters": WIDE}}
                                 for i in range(120)]}, "tools"),
]


@pytest.mark.parametrize("body,param", BAD_BODIES, ids=range(len(BAD_BODIES)))
def test_bad_input_is_a_4xx_with_an_error_body_and_the_server_goes_on(server: Server, body, param):
    status, answer = server.post("/v1/chat/completions", body)
    assert 400 <= status < 500, answer
    assert set(answer["error"]) == {"message", "type", "param", "code"} and answer["error"]["message"]
    if param is not None:
        assert answer["error"]["param"] == param
    status, ok = server.post("/v1/completions", {"prompt": "abc", "temperature": 0, "max_tokens": 2})
    assert status == 200 and ok["usage"]["completion_tokens"] == 2


def test_other_doors_refuse_in_shape(server: Server):
    assert server.get("/nope")[0] == 404 and "error" in server.get("/nope")[1]
    status, body = server.post("/v1/completions", {"prompt": "x" * 10, "max_tokens": 2, "pad": "y" * (9 << 20)})
    assert status == 413 and body["error"]["type"] == "invalid_request_error"
    status, body = server.get("/health", headers={"Host": "evil.example.com"})
    assert status == 403 and "Host" in body["error"]["message"]
    for host in ("localhost:8080", "127.0.0.1", "[::1]:9"):
        assert server.get("/health", headers={"Host": host})[0] == 200


def test_a_disconnected_stream_frees_its_slot_within_a_second(server: Server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    body = json.dumps({"prompt": "abc", "max_tokens": 200, "stream": True, "temperature": 1, "seed": 1}).encode()
    conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.readline().startswith(b"data: ")
    other = concurrent.futures.ThreadPoolExecutor(1).submit(
        lambda: server.client().completions.create(model="tiny", prompt="xyz", max_tokens=40, **GREEDY))
    conn.close()  # the client goes away mid-stream
    gone = time.monotonic()
    while any(s["state"] != "idle" for s in server.get("/slots")[1]) and time.monotonic() - gone < 5:
        if other.done() and sum(s["state"] != "idle" for s in server.get("/slots")[1]) == 0:
            break
        time.sleep(0.05)
    busy = [s for s in server.get("/slots")[1] if s["state"] != "idle"]
    assert len(busy) <= (0 if other.done() else 1) and time.monotonic() - gone < 1.5
    assert other.result(30).choices[0].finish_reason == "length"


def test_an_api_key_guards_every_route_but_health(tiny_model: Path):
    srv = Server(tiny_model, "--ctx-size", "128", "--slots", "1", env={"LOCALSPEC_API_KEY": "sekret"})
    try:
        srv.wait_ready()
        with pytest.raises(openai.AuthenticationError):
            srv.client(api_key="wrong").models.list()
        assert srv.get("/v1/models")[0] == 401
        assert srv.get("/v1/models", headers={"x-api-key": "sekret"})[0] == 200
        assert [m.id for m in srv.client(api_key="sekret").models.list().data] == ["tiny"]
    finally:
        assert srv.stop() == 0
    srv = Server(tiny_model, "--ctx-size", "128", "--slots", "1", "--api-key", "one", "--api-key", "two")
    try:  # repeated: either key is let in
        srv.wait_ready()
        assert [srv.get("/v1/models", headers={"x-api-key": k})[0] for k in ("one", "two", "three")] == [200, 200, 401]
    finally:
        assert srv.stop() == 0


def test_with_several_api_keys_each_drafts_only_from_its_own_earlier_requests(tiny_model: Path):
    """Two keys (the variable's space-separated list; --api-key may also be repeated): both
    are let in, and the store of earlier requests' texts is kept per key: an answer given to one key is
    drafted for that key's repeat, not for the other key's same question."""
    srv = Server(tiny_model, "--ctx-size", "256", "--slots", "1", "--alias", "tiny",
                 env={"LOCALSPEC_API_KEY": "alpha beta"})
    try:
        srv.wait_ready()

        def ask(key: str) -> tuple[str, int]:
            body = {"model": "tiny", "messages": [{"role": "user", "content": "the key test: tell a long story"}],
                    "max_tokens": 96, "temperature": 0, "speculative": {"mode": "ngram"}}
            status, out = srv.post("/v1/chat/completions", body, headers={"Authorization": f"Bearer {key}"})
            assert status == 200, out
            return out["choices"][0]["message"]["content"], out["speculative"]["accepted"]

        assert srv.post("/v1/chat/completions", {"messages": MSG}, headers={"x-api-key": "delta"})[0] == 401
        first, kept_first = ask("alpha")
        other, kept_other = ask("beta")  # the same question, another key: nothing of alpha's to draft
        again, kept_again = ask("alpha")
        assert first == other == again  # f32: drafts change nothing
        assert kept_first < 20 and kept_other < 20 and kept_again >= 60  # (the first tokens ramp: ledger.py)
    finally:
        assert srv.stop() == 0


def test_a_full_queue_answers_429_with_retry_after(tiny_model: Path):
    srv = Server(tiny_model, "--ctx-size", "2048", "--slots", "1", "--max-queue", "0")
    try:
        srv.wait_ready()
        long = concurrent.futures.ThreadPoolExecutor(1).submit(
            srv.post, "/v1/completions", {"prompt": "abc", "max_tokens": 1500, "temperature": 1, "seed": 2})
        deadline = time.monotonic() + 10
        while srv.get("/slots")[1][0]["state"] == "idle" and time.monotonic() < deadline:
            time.sleep(0.02)
        with pytest.raises(openai.RateLimitError):
            srv.client().completions.create(model="tiny", prompt="x", max_tokens=2)
        assert long.result(120)[0] == 200
    finally:
        srv.stop()


def test_streams_whose_client_left_before_the_answer_began_give_their_place_back(tiny_model: Path):
    """A client that sends a streaming request and goes before reading anything must not
    keep its place: with one slot and no queue, a later request still gets a 200."""
    srv = Server(tiny_model, "--ctx-size", "2048", "--slots", "1", "--max-queue", "0")
    try:
        srv.wait_ready()
        body = json.dumps({"prompt": "abc", "max_tokens": 400, "stream": True, "temperature": 1, "seed": 1}).encode()
        for _ in range(4):
            with socket.create_connection(("127.0.0.1", srv.port)) as s:
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            status, answer = srv.post("/v1/completions", {"prompt": "x", "max_tokens": 2})
            if status == 200:
                break
            assert status == 429, answer
            time.sleep(0.2)
        assert status == 200
        assert srv.get("/metrics")[0] == 200
    finally:
        srv.stop()


def test_sigterm_while_streaming_ends_the_stream_and_exits_0(tiny_model: Path):
    srv = Server(tiny_model, "--ctx-size", "4096", "--slots", "1")
    srv.wait_ready()
    stream = srv.client().chat.completions.create(model="tiny", messages=MSG, max_tokens=3000, temperature=1,
                                                  seed=3, stream=True)
    first = next(iter(stream))
    assert first.choices[0].delta.role == "assistant"
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    finishes = [ch.choices[0].finish_reason for ch in stream if ch.choices]
    assert srv.proc.wait(timeout=10) == 0 and time.monotonic() - t0 < 5
    assert finishes[-1] is not None
    assert f"ready at http://127.0.0.1:{srv.port}/v1" in srv.proc.stderr.read()


def test_cors_is_off_unless_origins_are_named(tiny_model: Path, server: Server):
    preflight = {"Origin": "http://app.example", "Access-Control-Request-Method": "POST"}
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("OPTIONS", "/v1/chat/completions", headers=preflight)
    assert conn.getresponse().getheader("access-control-allow-origin") is None
    srv = Server(tiny_model, "--ctx-size", "128", "--slots", "1", "--cors-origin", "http://app.example",
                 "--api-key", "k")
    try:
        srv.wait_ready()
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
        conn.request("OPTIONS", "/v1/chat/completions", headers=preflight)
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("access-control-allow-origin") == "http://app.example"
    finally:
        srv.stop()


def test_n_choices_stream_and_not(server: Server):
    c = server.client()
    full = c.chat.completions.create(model="tiny", messages=MSG, max_tokens=12, n=2, temperature=0.9, seed=11)
    assert [ch.index for ch in full.choices] == [0, 1]
    assert full.usage.completion_tokens == 24
    texts = {0: "", 1: ""}
    for chunk in c.chat.completions.create(model="tiny", messages=MSG, max_tokens=12, n=2, temperature=0.9, seed=11,
                                           stream=True):
        for ch in chunk.choices:
            texts[ch.index] += ch.delta.content or ""
    assert [texts[0], texts[1]] == [ch.message.content for ch in full.choices]
    with pytest.raises(openai.BadRequestError, match="'n'"):
        c.chat.completions.create(model="tiny", messages=MSG, n=5)


def test_response_format_and_grammar(server: Server):
    c = server.client()
    schema = {"type": "object", "properties": {"a": {"enum": ["x", "y"]}}, "required": ["a"], "additionalProperties": False}
    for stream in (False, True):
        kw = dict(model="tiny", messages=MSG, max_tokens=60, temperature=0.7, seed=1,
                  response_format={"type": "json_schema", "json_schema": {"name": "ab", "schema": schema}})
        if stream:
            text = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(stream=True, **kw)
                           if ch.choices)
        else:
            text = c.chat.completions.create(**kw).choices[0].message.content
        assert json.loads(text)["a"] in ("x", "y")
    obj = c.chat.completions.create(model="tiny", messages=MSG, max_tokens=200, temperature=0,
                                    response_format={"type": "json_object"})
    assert obj.choices[0].finish_reason == "length" or isinstance(json.loads(obj.choices[0].message.content), dict)
    status, body = server.post("/v1/completions", {"prompt": "abc", "max_tokens": 20, "temperature": 0,
                                                   "grammar": 'root ::= "yes" | "no"'})
    assert status == 200 and body["choices"][0]["text"] in ("yes", "no")
    with pytest.raises(openai.BadRequestError) as bad:
        c.chat.completions.create(model="tiny", messages=MSG, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/nope"}}})
    assert bad.value.body["param"] == "response_format" and "JSON schema is not valid" in bad.value.body["message"]
    status, body = server.post("/v1/completions", {"prompt": "abc", "grammar": "root ::= ("})
    assert status == 400 and body["error"]["param"] == "grammar"
    huge = "root ::= " + " ".join(f'"{i}"' for i in range(40_000))  # 270 KB: past the size limit
    status, body = server.post("/v1/completions", {"prompt": "abc", "grammar": huge})
    assert status == 400 and body["error"]["param"] == "grammar" and "at most" in body["error"]["message"]
    status, body = server.post("/v1/completions", {"prompt": "abc", "max_tokens": 2})
    assert status == 200


def test_an_answer_given_before_is_drafted_from_earlier_requests(server: Server):
    """serve keeps recent requests' texts (--store-tokens): the same question again drafts
    its earlier answer; a request may opt out ("share": false)."""
    def ask(**spec):
        body = {"model": "tiny", "messages": [{"role": "user", "content": "the store test: tell a long story"}],
                "max_tokens": 96, "temperature": 0, "speculative": {"mode": "ngram", **spec}}
        status, out = server.post("/v1/chat/completions", body)
        assert status == 200, out
        return out["choices"][0]["message"]["content"], out["speculative"]["accepted"]

    first, kept_first = ask()
    again, kept_again = ask()
    alone, kept_alone = ask(share=False)
    assert first == again == alone  # f32: drafts change nothing
    assert kept_again >= 60 and kept_first < 20 and kept_alone < 20  # of 95 (the first tokens ramp: ledger.py)
    status, bad = server.post("/v1/chat/completions", {"messages": MSG, "speculative": {"share": "yes"}})
    assert status == 400 and bad["error"]["param"] == "speculative.share"
