"""The HTTP routes of ``localspec serve``: thin handlers over the engines of a Fleet.

The server listens at once; a request's ``model`` picks one of the fleet's models, which
loads on first use and is held (never unloaded) until the request ends. Where one model
was named at start it loads behind the listening server (``/health`` answers 503 until it
is ready, as llama-server's does). Every request is checked before it reaches the
engine (the Host header on a loopback address, the API key, the body size, the JSON,
each field), and every failure is an OpenAI-shaped error body with a 4xx status; only
a bug in localspec is a 500. A client that goes away cancels its request, which frees
its slot at the engine's next step.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from fastapi import FastAPI, Request as HTTPRequest
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from localspec.errors import EngineClosed, InvalidRequest, LocalspecError, ModelNotFound, OutOfMemory, PromptTooLong
from localspec.fleet import Fleet, Unavailable, parse_keep_alive
from localspec import toolcalls
from localspec.reply import Delta, ReplyParser, thinks
from localspec.server import anthropic, auth, openai, responses
from localspec.server.metrics import Metrics
from localspec.server.openai import APIError
from localspec.types import FinishReason, Request, Result, SamplingParams

BODY_LIMIT = 8 << 20  # bytes: a long code file in a prompt fits many times over
DISCONNECT_POLL_S = 0.2  # how often a non-streaming request looks for its client
ROUTES = ("/health", "/v1/models", "/slots", "/metrics", "/v1/chat/completions", "/v1/completions", "/v1/messages",
          "/v1/responses", "/chat/completions", "/completions", "/responses")


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    # Keys any of which a request must send (none: open). With several, each key's requests
    # draft only from that key's earlier requests (the engine's store, Request.store_key).
    api_keys: tuple[str, ...] = ()
    max_queue: int = 64
    cors_origins: tuple[str, ...] = ()
    body_limit: int = BODY_LIMIT
    # <think> blocks: "auto" splits them into reasoning_content where the template thinks,
    # "deepseek" always, "none" leaves them in the content
    reasoning_format: str = "auto"
    store_tokens: int = 0  # tokens of earlier requests' texts kept for drafting (Engine.keep_texts)


@dataclass(frozen=True)
class Held:
    """The model a request runs on: its engine, its name in answers, its settings."""

    engine: Any
    name: str
    sampling: SamplingParams
    max_tokens: int | None


class ServerState:
    """The fleet of models, whether the model named at start is loaded, and the requests
    under way (for 429 and shutdown)."""

    def __init__(self, fleet: Fleet | None = None) -> None:
        self.fleet: Any = fleet
        self.ready = False  # /health: the model named at start loaded (or none was named)
        self.error: str | None = None
        self.closing = False
        self.outstanding: dict[str, int] = {}  # model -> requests' places taken (slots or queue)
        self._streams: dict[Any, str] = {}  # stream -> the model it runs on
        self._lock = threading.Lock()

    def admit(self, model: str, limit: int, n: int = 1) -> None:
        """Take ``n`` places (slots or queue) for a request, or answer 429."""
        with self._lock:
            if self.outstanding.get(model, 0) + n > limit:
                raise APIError(429, "The server is busy: every slot is taken and the queue is full; retry shortly.",
                               headers={"Retry-After": "1"})
            self.outstanding[model] = self.outstanding.get(model, 0) + n

    def track(self, streams: list[Any], model: str) -> None:
        with self._lock:
            self._streams.update(dict.fromkeys(streams, model))

    def done(self, model: str, streams: list[Any], n: int) -> None:
        """Give back a request's places on ``model``."""
        with self._lock:
            self.outstanding[model] -= n
            for s in streams:
                self._streams.pop(s, None)

    def model_of(self, streams: list[Any]) -> str:
        with self._lock:
            return next((self._streams[s] for s in streams if s in self._streams), "")

    def cancel_all(self) -> None:
        """Shutting down: every running request ends now, with what it has."""
        self.closing = True
        with self._lock:
            streams = list(self._streams)
        for stream in streams:
            stream.cancel()


def create_app(config: ServerConfig, state: ServerState) -> FastAPI:
    app = FastAPI(title="localspec", docs_url=None, redoc_url=None, openapi_url=None)
    metrics = Metrics()
    fleet = state.fleet
    embed_locks: dict[int, asyncio.Lock] = {}  # engine id -> one embedding request at a time

    # ------------------------------------------------------------ errors

    @app.exception_handler(APIError)
    async def _api_error(http: HTTPRequest, exc: APIError) -> JSONResponse:
        return error_response(http.url.path, exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(http: HTTPRequest, exc: StarletteHTTPException) -> JSONResponse:
        message = "Unknown route." if exc.status_code == 404 else str(exc.detail)
        return error_response(http.url.path, APIError(exc.status_code, message))

    @app.exception_handler(LocalspecError)
    async def _user_error(http: HTTPRequest, exc: LocalspecError) -> JSONResponse:
        status = exc.http_status if 400 <= exc.http_status < 500 else 400
        return error_response(http.url.path, APIError(status, exc.message))

    @app.exception_handler(Exception)
    async def _bug(http: HTTPRequest, exc: Exception) -> JSONResponse:
        return error_response(http.url.path, APIError(500, f"Internal error: {exc!r}."))

    # ------------------------------------------------------------ plain routes

    @app.get("/health")
    async def health() -> JSONResponse:
        if state.error:
            return JSONResponse(APIError(503, state.error).body(), status_code=503)
        if not state.ready:
            return JSONResponse(APIError(503, "Loading model").body(), status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        servables = await asyncio.to_thread(fleet.servables)
        return {"object": "list", "data": [_model_card(s, fleet.state_of(s.id)) for s in servables]}

    @app.get("/v1/models/{name:path}")
    async def one_model(name: str) -> dict[str, Any]:
        try:
            servable = await asyncio.to_thread(fleet.find, name)
        except ModelNotFound as exc:
            raise APIError(404, exc.message, "model", "model_not_found") from None
        return _model_card(servable, fleet.state_of(servable.id))

    @app.get("/slots")
    async def slots(model: str | None = None) -> list[dict[str, Any]]:
        engine = _loaded(model)
        return [{"id": s.seq, "state": s.state, "cached_tokens": s.cached_tokens, "speculative": s.spec,
                 "acceptance_rate": round(s.acceptance, 4) if s.acceptance is not None else None}
                for s in engine.slot_states()]

    @app.get("/metrics")
    async def prometheus() -> Response:
        metrics.slots_busy.clear()
        metrics.queue_depth.clear()
        for m in fleet.loaded():
            states = m.engine.slot_states()
            metrics.slots_busy.labels(m.servable.id).set(sum(s.state != "idle" for s in states))
            metrics.queue_depth.labels(m.servable.id).set(
                max(0, state.outstanding.get(m.servable.id, 0) - len(states)))
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    # ------------------------------------------------------------ generation

    @app.post("/v1/chat/completions")
    @app.post("/chat/completions")
    async def chat(http: HTTPRequest) -> Response:
        body = openai.parse(openai.ChatRequest, await _read_json(http))
        held = await _hold(http, body)
        engine = held.engine
        request = openai.chat_request(body, held.sampling, engine.spec, engine.model.n_vocab, held.max_tokens)
        return await _generate(http, held, request, body, chat=True)

    @app.post("/v1/completions")
    @app.post("/completions")
    async def completions(http: HTTPRequest) -> Response:
        body = openai.parse(openai.CompletionRequest, await _read_json(http))
        held = await _hold(http, body)
        engine = held.engine
        request = openai.completion_request(body, held.sampling, engine.spec, engine.model.n_vocab,
                                            held.max_tokens or 16)
        return await _generate(http, held, request, body, chat=False)

    @app.post("/v1/messages")
    async def messages(http: HTTPRequest) -> Response:
        """Anthropic's Messages API: the same engine request as a chat completion."""
        body = openai.parse(anthropic.MessagesRequest, await _read_json(http))
        held = await _hold(http, body)
        engine, model_name = held.engine, held.name
        request = anthropic.to_request(body, held.sampling, engine.spec, engine.model.n_vocab)
        param = "grammar" if body.grammar is not None else "tools"
        streams = await _start(http, held, request, 1, chat=True, grammar_param=param)
        parsers = [_parser(engine, request, streams[0])]
        mid = anthropic.new_id()
        if body.stream:
            return StreamingResponse(_anthropic_sse(mid, model_name, streams, parsers, request.stop),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        try:
            result, reply = await _one_reply(http, streams, parsers)
            return JSONResponse(anthropic.message(mid, model_name, result, reply, request.stop))
        finally:
            _finished(streams)

    @app.post("/v1/embeddings")
    @app.post("/embeddings")
    async def embeddings(http: HTTPRequest) -> JSONResponse:
        """OpenAI's embeddings: the model's own pooling in a context of its own, one
        request at a time per model (the others wait here, not in threads)."""
        body = openai.parse(openai.EmbeddingRequest, await _read_json(http))
        inputs = openai.embedding_inputs(body)
        held = await _hold(http, body)
        engine = held.engine
        lock = embed_locks.setdefault(id(engine), asyncio.Lock())
        async with lock:
            try:
                embedder = await asyncio.to_thread(engine.embedder)
            except OutOfMemory as exc:
                raise APIError(503, exc.message, "model", "model_unavailable") from None
            except LocalspecError as exc:
                raise APIError(400, exc.message, "model") from None
            if body.dimensions is not None and body.dimensions != embedder.n_embd:
                raise APIError(400, f"Invalid 'dimensions': {held.name} gives {embedder.n_embd}-dimensional "
                                    f"embeddings, not {body.dimensions}.", "dimensions")
            tokens = [embedder.tokenize(x) if isinstance(x, str) else x for x in inputs]
            try:
                vectors = await asyncio.to_thread(embedder.embed, tokens)
            except InvalidRequest as exc:
                raise APIError(400, exc.message, "input") from None
        metrics.embedded.labels(held.name).inc(len(vectors))
        return JSONResponse(openai.embedding_response(held.name, vectors, sum(map(len, tokens)), body.encoding_format))

    @app.post("/v1/responses")
    @app.post("/responses")
    async def responses_route(http: HTTPRequest) -> Response:
        """OpenAI's Responses API: the same engine request as a chat completion."""
        body = openai.parse(responses.ResponsesRequest, await _read_json(http))
        held = await _hold(http, body)
        engine, model_name = held.engine, held.name
        request = responses.to_request(body, held.sampling, engine.spec, engine.model.n_vocab, held.max_tokens)
        grammar_param = "grammar" if body.grammar is not None else "text.format" if request.constraint else "tools"
        streams = await _start(http, held, request, 1, chat=True, grammar_param=grammar_param)
        parsers = [_parser(engine, request, streams[0])]
        rid = responses.new_id("resp")
        if body.stream:
            return StreamingResponse(_responses_sse(rid, model_name, body, request, streams, parsers),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        try:
            result, reply = await _one_reply(http, streams, parsers)
            return JSONResponse(responses.response(rid, model_name, body, request, responses.output(reply), result, reply))
        finally:
            _finished(streams)

    async def _one_reply(http: HTTPRequest, streams: list[Any], parsers: list[ReplyParser]) -> tuple[Result, Any]:
        """A one-choice request run to its end through its parser: the result and reply."""
        await _drain(http, streams, lambda i, event: _feed(parsers, streams, i, event.text))
        result = streams[0].result
        if result.finish_reason is FinishReason.ERROR:
            raise APIError(500, result.error or "Generation failed.")
        parsers[0].close()
        return result, parsers[0].reply

    async def _responses_sse(rid: str, model_name: str, body: Any, request: Request, streams: list[Any],
                             parsers: list[ReplyParser]) -> AsyncIterator[bytes]:
        sse = _named_event
        events = responses.Events()
        try:
            started = responses.response(rid, model_name, body, request, [])
            yield sse(*events.event("response.created", response=started))
            yield sse(*events.event("response.in_progress", response=started))
            async for token in streams[0]:
                for part in _feed(parsers, streams, 0, token.text):
                    for name, data in events.feed(part):
                        yield sse(name, data)
            result: Result = streams[0].result
            if result.finish_reason is FinishReason.ERROR:
                failed = {**started, "status": "failed",
                          "error": {"code": "server_error", "message": result.error or "Generation failed."}}
                yield sse(*events.event("response.failed", response=failed))
                return
            for part in parsers[0].close():
                for name, data in events.feed(part):
                    yield sse(name, data)
            for name, data in events.end():
                yield sse(name, data)
            final = responses.response(rid, model_name, body, request, events.items, result, parsers[0].reply)
            kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
            yield sse(*events.event(kind, response=final))
        finally:
            _cancel(streams)
            _finished(streams)

    async def _anthropic_sse(mid: str, model_name: str, streams: list[Any], parsers: list[ReplyParser],
                             stops: list[str]) -> AsyncIterator[bytes]:
        event = _named_event
        blocks = anthropic.Blocks()
        try:
            yield event(*anthropic.start_event(mid, model_name, streams[0].prompt_tokens))
            async for token in streams[0]:
                for part in _feed(parsers, streams, 0, token.text):
                    for name, data in blocks.events(part):
                        yield event(name, data)
            result: Result = streams[0].result
            if result.finish_reason is FinishReason.ERROR:
                yield event("error", anthropic.error_body(APIError(500, result.error or "Generation failed.")))
                return
            for part in parsers[0].close():
                for name, data in blocks.events(part):
                    yield event(name, data)
            for name, data in blocks.end(result, parsers[0].reply, stops):
                yield event(name, data)
        finally:
            _cancel(streams)
            _finished(streams)

    async def _start(http: HTTPRequest, held: Held, request: Request, n: int, *, chat: bool,
                     grammar_param: str) -> list[Any]:
        """Admit and submit a request's ``n`` choices, or answer 4xx/503 naming the field;
        with several API keys, its drafts come only from its own key's earlier requests."""
        request = replace(request, store_key=getattr(http.state, "store_key", ""))
        engine = held.engine
        slots = len(engine.slot_states())
        if request.max_tokens is not None and request.max_tokens > engine.n_ctx:
            raise APIError(400, f"Invalid 'max_tokens': {request.max_tokens} is more than the context holds "
                                f"({engine.n_ctx} tokens per slot).", "max_tokens")
        try:  # compiled here (cached), so that a bad one names its field
            constraint = engine.constraint_for(request)
            if constraint is not None:
                await asyncio.to_thread(engine.constraints.grammar, constraint)
        except LocalspecError as exc:
            message, param = exc.message, grammar_param
            if request.tools and request.constraint is None:
                message, param = message.replace("The Lark grammar", "The tools' parameter schemas"), "tools"
            if "tool_choice" in message or (request.tools and "tool" in message.lower()):
                param = "tool_choice" if "tool_choice" in message else "tools"
            raise APIError(400, message, param) from None
        state.admit(held.name, slots + config.max_queue, n)
        streams: list[Any] = []
        try:
            try:
                streams = await asyncio.to_thread(engine.submit_n, request, n)
            except PromptTooLong as exc:
                raise APIError(400, exc.message, "messages" if chat else "prompt") from None
            except EngineClosed:
                raise APIError(503, "The server is shutting down.") from None
            except LocalspecError as exc:
                raise APIError(400, exc.message) from None
            state.track(streams, held.name)
        except BaseException:
            state.done(held.name, streams, n)
            raise
        return streams

    async def _generate(http: HTTPRequest, held: Held, request: Request, body: Any, *, chat: bool) -> Response:
        engine, model_name = held.engine, held.name
        n = body.n if body.n is not None else 1
        slots = len(engine.slot_states())
        if not 1 <= n <= slots:
            raise APIError(400, f"Invalid 'n': must be from 1 to {slots} (the server's slots), not {n}.", "n")
        streams = await _start(http, held, request, n, chat=chat,
                               grammar_param="grammar" if body.grammar is not None else "response_format")
        rid = openai.new_id("chatcmpl" if chat else "cmpl")
        formatter = openai.LogprobFormatter(engine.model.token_to_piece)
        parsers = [_parser(engine, request, s) for s in streams] if chat else None
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return StreamingResponse(_sse(_events(rid, model_name, streams, formatter, include_usage, request, parsers),
                                          streams),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        try:
            return JSONResponse(await _collect(http, rid, model_name, streams, formatter, request, parsers))
        finally:
            _finished(streams)

    def _parser(engine: Any, request: Request, stream: Any) -> ReplyParser:
        """What splits a chat answer: tool calls when the request offers tools, <think>
        blocks per --reasoning-format."""
        calls = toolcalls.offered(request.tools, request.tool_choice)
        fmt = config.reasoning_format
        think = fmt == "deepseek" or (fmt == "auto" and thinks(engine.model.chat_template))
        return ReplyParser(family=engine.tool_family if calls else None, names={t.name for t in calls},
                           think=think, thinking=think and stream.opens_thinking)

    def _feed(parsers: list[ReplyParser], streams: list[Any], i: int, text: str) -> list[Delta]:
        """Choice i's next text through its parser; a repeated tool call ends the choice."""
        parts = parsers[i].feed(text)
        if parsers[i].repeated:
            streams[i].cancel()
        return parts

    def _finished(streams: list[Any]) -> None:
        model = state.model_of(streams)
        state.done(model, streams, len(streams))
        for stream in streams:
            if stream.result is not None:
                metrics.finished(stream.result, model)

    async def _collect(http: HTTPRequest, rid: str, model_name: str, streams: list[Any], formatter: openai.LogprobFormatter,
                       request: Request, parsers: list[ReplyParser] | None) -> dict[str, Any]:
        """Run a non-streaming request to its end, cancelling it if the client leaves."""
        watch = (lambda i, event: _feed(parsers, streams, i, event.text)) if parsers else None
        events = await _drain(http, streams, watch)
        results: list[Result] = [s.result for s in streams]
        failed = next((r for r in results if r.finish_reason is FinishReason.ERROR), None)
        if failed is not None:
            raise APIError(500, failed.error or "Generation failed.")
        tokens = [[e for e in evs if e.token_id >= 0] for evs in events]
        if parsers is not None:
            for parser in parsers:
                parser.close()
            logprobs = [[formatter.chat_entry(e) for e in t] if request.logprobs else None for t in tokens]
            return openai.chat_response(rid, model_name, results, logprobs, [p.reply for p in parsers])
        logprobs = [openai.completion_logprobs([formatter.completion_entry(e) for e in t]) if request.logprobs
                    else None for t in tokens]
        return openai.completion_response(rid, model_name, results, logprobs)

    async def _drain(http: HTTPRequest, streams: list[Any],
                     watch: Callable[[int, Any], Any] | None = None) -> list[list[Any]]:
        """Every event of ``streams`` once they end (each shown to ``watch`` as it comes),
        cancelling them if the client leaves."""
        events: list[list[Any]] = [[] for _ in streams]

        async def consume(i: int, stream: Any) -> None:
            async for event in stream:
                events[i].append(event)
                if watch is not None:
                    watch(i, event)

        task = asyncio.ensure_future(asyncio.gather(*(consume(i, s) for i, s in enumerate(streams))))
        try:
            while not task.done():
                await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
                if not task.done() and await http.is_disconnected():
                    _cancel(streams)
            await task
        finally:
            if not task.done():
                _cancel(streams)
                task.cancel()
        return events

    async def _sse(chunks: AsyncIterator[dict[str, Any]], streams: list[Any]) -> AsyncIterator[bytes]:
        """Server-sent events; a client gone (the task cancelled) cancels the request."""
        try:
            async for chunk in chunks:
                yield b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"
        finally:
            _cancel(streams)
            _finished(streams)

    async def _events(rid: str, model_name: str, streams: list[Any], formatter: openai.LogprobFormatter, include_usage: bool,
                      request: Request, parsers: list[ReplyParser] | None) -> AsyncIterator[dict[str, Any]]:
        """The chunks of a streamed request, in either API's shape: each choice's tokens as
        they come (a chat answer split into content, reasoning and tool calls), its finish,
        then the usage if asked for."""
        created = int(time.time())
        offsets = [0] * len(streams)
        ids: list[dict[int, str]] = [{} for _ in streams]  # per choice: tool call index -> id
        chat = parsers is not None
        if chat:
            for i in range(len(streams)):
                yield openai.chat_chunk(rid, model_name, created, {"role": "assistant", "content": ""}, index=i)
        async for i, event in _merged(streams):
            if event is None:  # choice i ended
                result: Result = streams[i].result
                if result.finish_reason is FinishReason.ERROR:
                    yield APIError(500, result.error or "Generation failed.").body()
                    return
                if parsers is not None:
                    for part in parsers[i].close():
                        yield openai.chat_chunk(rid, model_name, created, openai.delta(part, ids[i]), index=i)
                    reason = openai.finish_reason(result.finish_reason, parsers[i].reply)
                    yield openai.chat_chunk(rid, model_name, created, {}, reason, index=i)
                else:
                    reason = openai.finish_reason(result.finish_reason)
                    yield openai.completion_chunk(rid, model_name, created, "", reason, index=i)
                continue
            wanted = request.logprobs and event.token_id >= 0
            if parsers is not None:
                logprobs = [formatter.chat_entry(event)] if wanted else None
                parts = _feed(parsers, streams, i, event.text) or ([Delta("content")] if logprobs else [])
                for j, part in enumerate(parts):
                    yield openai.chat_chunk(rid, model_name, created, openai.delta(part, ids[i]),
                                            logprobs=logprobs if j == 0 else None, index=i)
                continue
            logprobs = openai.completion_logprobs([formatter.completion_entry(event)], offsets[i]) if wanted else None
            offsets[i] += len(event.text)
            if event.text or logprobs:
                yield openai.completion_chunk(rid, model_name, created, event.text, logprobs=logprobs, index=i)
        if include_usage:
            kind = "chat.completion.chunk" if chat else "text_completion"
            yield openai.usage_chunk(rid, model_name, created, kind, [s.result for s in streams])

    # ------------------------------------------------------------ helpers

    def _loaded(name: str | None) -> Any:
        """A loaded model's engine, for the routes that only look (/slots)."""
        if state.closing:
            raise APIError(503, "The server is shutting down.")
        try:
            servable = fleet.find(name)
        except ModelNotFound as exc:
            raise APIError(404, exc.message, "model", "model_not_found") from None
        m = fleet.state_of(servable.id)
        if m is None:
            raise APIError(503, state.error or f"The model '{servable.id}' is not loaded.")
        return m.engine

    async def _hold(http: HTTPRequest, body: Any) -> Held:
        """The request's model, loaded and held until the whole response is sent (the
        Guard releases it): 404 for a name the server cannot serve, 503 where it cannot
        be loaded now."""
        if state.closing:
            raise APIError(503, "The server is shutting down.")
        keep_alive: Any = "default"
        if body.keep_alive is not None:
            try:
                keep_alive = parse_keep_alive(body.keep_alive)
            except ValueError as exc:
                raise APIError(400, f"Invalid 'keep_alive': {exc}.", "keep_alive") from None
        try:
            lease = await asyncio.to_thread(fleet.acquire, body.model, keep_alive)
        except ModelNotFound as exc:
            raise APIError(404, exc.message, "model", "model_not_found") from None
        except Unavailable as exc:
            raise APIError(503, exc.message, code="model_unavailable",
                           headers={"Retry-After": "5"} if exc.retry else None) from None
        except LocalspecError as exc:
            raise APIError(503, exc.message, "model", "model_load_failed") from None
        http.scope.setdefault("state", {}).setdefault("leases", []).append((lease, keep_alive))
        settings = lease.loaded.servable.settings
        return Held(lease.engine, lease.id, settings.sampling(), settings.max_tokens)

    async def _read_json(http: HTTPRequest) -> Any:
        length = http.headers.get("content-length")
        if length and length.isdigit() and int(length) > config.body_limit:
            raise APIError(413, f"The request body is over {config.body_limit} bytes.")
        chunks, total = [], 0
        async for chunk in http.stream():
            total += len(chunk)
            if total > config.body_limit:
                raise APIError(413, f"The request body is over {config.body_limit} bytes.")
            chunks.append(chunk)
        try:
            return json.loads(b"".join(chunks), parse_constant=_no_constant)
        except (ValueError, UnicodeDecodeError):
            raise APIError(400, "The request body is not valid JSON.") from None
        except RecursionError:
            raise APIError(400, "The request body nests too deeply.") from None

    app.add_middleware(Guard, config=config, metrics=metrics)
    if config.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(config.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type", "x-api-key"])
    return app


def error_response(path: str, error: APIError) -> JSONResponse:
    """An error in the shape of the API the path belongs to (Anthropic's or OpenAI's)."""
    body = anthropic.error_body(error) if anthropic.is_messages(path) else error.body()
    return JSONResponse(body, status_code=error.status, headers=error.headers)


def _named_event(name: str, data: dict[str, Any]) -> bytes:
    """A server-sent event with its name (the Messages and Responses APIs' framing)."""
    return f"event: {name}\ndata: ".encode() + json.dumps(data, ensure_ascii=False).encode() + b"\n\n"


def _cancel(streams: list[Any]) -> None:
    for stream in streams:
        if stream.result is None:
            stream.cancel()


async def _merged(streams: list[Any]) -> AsyncIterator[tuple[int, Any]]:
    """The events of several streams as they come: (choice, event), and (choice, None)
    when that choice has ended."""
    if len(streams) == 1:
        async for event in streams[0]:
            yield 0, event
        yield 0, None
        return
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()

    async def pump(i: int, stream: Any) -> None:
        try:
            async for event in stream:
                await queue.put((i, event))
        finally:
            await queue.put((i, None))

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    try:
        left = len(streams)
        while left:
            item = await queue.get()
            left -= item[1] is None
            yield item
    finally:
        for task in tasks:
            task.cancel()


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _model_card(servable: Any, loaded: Any) -> dict[str, Any]:
    """OpenAI's model object, and what ``localspec ps`` shows: loaded or not, its draft,
    context, and when loaded its memory, slots and idle time."""
    card: dict[str, Any] = {"id": servable.id, "object": "model", "created": 0, "owned_by": "localspec",
                            "loaded": loaded is not None}
    s = servable.settings
    if loaded is None:
        card.update(draft=s.draft, context_length=s.ctx_size, slots=s.slots)
        return card
    engine, idle = loaded.engine, loaded.idle_s
    states = engine.slot_states()
    card.update(
        draft=loaded.files.draft.name if loaded.files and loaded.files.draft else None,
        context_length=engine.n_ctx, slots=len(states), slots_busy=sum(st.state != "idle" for st in states),
        file=engine.model.path.name, speculation=engine.spec.mode,
        memory_bytes=sum(d.planned_bytes for d in loaded.plan.devices) if loaded.plan else None,
        idle_s=round(idle, 1) if idle is not None else None,
        keep_alive_s=loaded.keep_alive,
        expires_in_s=round(max(0.0, loaded.keep_alive - idle), 1) if idle is not None and loaded.keep_alive is not None
        else None,
    )
    return card


class Guard:
    """Checks before any route (plain ASGI, so streams and disconnects pass untouched):
    the Host header when bound to loopback (403), the API key on every route but
    /health (401); and the count of requests by route and status."""

    def __init__(self, app: Callable, config: ServerConfig, metrics: Metrics) -> None:
        self.app, self.config, self.metrics = app, config, metrics
        self.check_host = auth.is_loopback(config.host)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        path = scope["path"]
        status = [500]

        async def record(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            error = self._admit(scope, path, headers)
            if error is not None:
                await error_response(path, error)(scope, receive, record)
            else:
                await self.app(scope, receive, record)
        finally:
            for lease, keep_alive in scope.get("state", {}).pop("leases", ()):
                lease.release(keep_alive)
            route = path if path in ROUTES or path.startswith("/v1/models/") else "other"
            self.metrics.requests.labels("/v1/models" if path.startswith("/v1/models/") else route,
                                         str(status[0])).inc()

    def _admit(self, scope: dict, path: str, headers: dict[str, str]) -> APIError | None:
        """The error a request is refused with, or None: it is let in, and with several
        API keys its key names the store it drafts from (``scope["state"]``)."""
        if self.check_host and not auth.host_allowed(headers.get("host")):
            return APIError(403, "The Host header must name this machine (localhost, 127.0.0.1 or [::1]).")
        keys = self.config.api_keys
        if keys and path != "/health":
            key = auth.matching_key(keys, headers.get("authorization"), headers.get("x-api-key"))
            if key is None:
                return APIError(401, "A valid API key is required: send 'Authorization: Bearer KEY'.",
                                code="invalid_api_key")
            if len(keys) > 1:  # read by the routes as http.state.store_key
                scope.setdefault("state", {})["store_key"] = auth.key_id(key)
        return None
