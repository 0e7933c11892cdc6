"""The OpenAI API's shapes, as pure converters: request JSON -> an engine Request,
engine events and results -> response JSON and stream chunks. No FastAPI here.

Fields follow OpenAI's API and what llama-server accepts (``top_k``, ``min_p``,
``repeat_penalty``); unknown fields are ignored, as OpenAI-compatible servers do.
Fields of features not built yet (tools, response_format) are refused with a 400 that
says so, never silently dropped. Every validation failure is an ``APIError`` naming the
field, with the message OpenAI's clients show.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError

from localspec.errors import InvalidRequest
from localspec.reply import Delta, Reply
from localspec.types import (
    MODES,
    Constraint,
    FinishReason,
    Message,
    Request,
    Result,
    SamplingParams,
    SpecConfig,
    TokenEvent,
    Tool,
    ToolCall,
)

Number = Union[StrictInt, StrictFloat]
MAX_STOP = 16  # stop strings per request (OpenAI allows 4; llama-server more)
MAX_STOP_LEN = 1024


class APIError(Exception):
    """An error answered in OpenAI's shape: ``{"error": {message, type, param, code}}``."""

    TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
             404: "not_found_error", 405: "invalid_request_error", 413: "invalid_request_error",
             429: "rate_limit_error", 500: "server_error", 503: "unavailable_error"}

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": self.code}}


# ------------------------------------------------------------------ requests


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TextPart(_Body):
    type: Literal["text"]
    text: StrictStr


class FunctionCall(_Body):
    name: StrictStr
    arguments: StrictStr  # a JSON object's text


class ToolCallParam(_Body):
    id: Optional[StrictStr] = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[StrictStr, list[TextPart], None] = None
    name: Optional[StrictStr] = None
    tool_calls: Optional[list[ToolCallParam]] = None  # an assistant's earlier calls
    tool_call_id: Optional[StrictStr] = None  # a tool message: the call it answers

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class Speculative(_Body):
    """The ``speculative`` extension: this request's speculation (engine.SpecConfig)."""

    mode: Optional[Literal[MODES]] = None  # type: ignore[valid-type]
    draft_max: Optional[StrictInt] = None
    draft_min: Optional[StrictInt] = None
    draft_p_min: Optional[Number] = None
    ngram_min: Optional[StrictInt] = None
    ngram_max: Optional[StrictInt] = None
    share: Optional[StrictBool] = None  # false: neither copy from earlier requests nor keep this one


class JsonSchemaFormat(_Body):
    name: Optional[StrictStr] = None
    schema_: Optional[dict[str, Any]] = Field(default=None, alias="schema")
    strict: Optional[StrictBool] = None


class ResponseFormat(_Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: Optional[JsonSchemaFormat] = None


class FunctionDef(_Body):
    name: StrictStr
    description: Optional[StrictStr] = None
    parameters: Optional[dict[str, Any]] = None
    strict: Optional[StrictBool] = None


class ToolDef(_Body):
    type: Literal["function"]
    function: FunctionDef


class _Named(_Body):
    name: StrictStr


class NamedToolChoice(_Body):
    type: Literal["function"]
    function: _Named


class StreamOptions(_Body):
    include_usage: StrictBool = False


class _Common(_Body):
    model: Optional[StrictStr] = None
    keep_alive: Union[StrictStr, StrictInt, StrictFloat, None] = None  # extension: Ollama's
    max_tokens: Optional[StrictInt] = None
    temperature: Optional[Annotated[Number, Field(ge=0, le=2)]] = None
    top_p: Optional[Annotated[Number, Field(gt=0, le=1)]] = None
    top_k: Optional[Annotated[StrictInt, Field(ge=0)]] = None
    min_p: Optional[Annotated[Number, Field(ge=0, le=1)]] = None
    seed: Optional[StrictInt] = None
    stop: Union[StrictStr, list[StrictStr], None] = None
    presence_penalty: Optional[Annotated[Number, Field(ge=-2, le=2)]] = None
    frequency_penalty: Optional[Annotated[Number, Field(ge=-2, le=2)]] = None
    repeat_penalty: Optional[Annotated[Number, Field(gt=0)]] = None
    logit_bias: Optional[dict[StrictStr, Number]] = None
    n: Optional[StrictInt] = None
    user: Optional[StrictStr] = None
    stream: StrictBool = False
    stream_options: Optional[StreamOptions] = None
    speculative: Optional[Speculative] = None
    response_format: Optional[ResponseFormat] = None
    grammar: Optional[StrictStr] = None  # extension: GBNF, or Lark with a first line %llguidance


class ChatRequest(_Common):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: Optional[StrictInt] = None
    logprobs: StrictBool = False
    top_logprobs: Optional[Annotated[StrictInt, Field(ge=0, le=20)]] = None
    tools: Optional[list[ToolDef]] = None
    tool_choice: Union[Literal["auto", "none", "required"], NamedToolChoice, None] = None
    parallel_tool_calls: Optional[StrictBool] = None


class CompletionRequest(_Common):
    prompt: Union[StrictStr, list[StrictStr], list[StrictInt]]
    logprobs: Optional[Annotated[StrictInt, Field(ge=0, le=5)]] = None
    echo: StrictBool = False


# Fields of features that later work adds: refused until they work, never dropped.
UNSUPPORTED = {"functions": "the legacy 'functions' (use 'tools')", "function_call": "the legacy 'function_call' "
                                                                                     "(use 'tool_choice')"}
REFUSED = ("chat_template", "chat_template_kwargs")  # a request must not run its own template


def parse(kind: type[_Body], body: Any) -> Any:
    """Validate a decoded JSON body into ``kind``, or raise a 400 naming the field."""
    if not isinstance(body, dict):
        raise APIError(400, "The request body must be a JSON object.")
    for key in REFUSED:
        if key in body:
            raise APIError(400, f"'{key}' is not accepted: the server renders the model's own chat template.", key)
    for key, feature in UNSUPPORTED.items():
        if body.get(key) not in (None, [], {}):
            raise APIError(400, f"'{key}' is not supported: this server does not take {feature}.", key)
    try:
        return kind.model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = _param(err["loc"])
        raise APIError(400, f"Invalid '{param}': {_say(err)}.", param) from None


def _param(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part) in ("str", "int", "float", "bool", "none") or str(part).startswith(
                ("literal[", "list[", "dict[", "function-", "constrained-", "union[", "nullable[")):
            continue  # a union member's name, not a field
        else:
            out += ("." if out else "") + str(part)
    return out or "body"


def _say(err: dict) -> str:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    if kind == "missing":
        return "this field is required"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')} (got {shown})"
    bounds = {"greater_than_equal": "at least", "greater_than": "greater than",
              "less_than_equal": "at most", "less_than": "less than"}
    if kind in bounds:
        bound = next(iter(ctx.values()), "?")
        return f"must be {bounds[kind]} {bound} (got {shown})"
    if kind == "too_short":
        return "must not be empty"
    if kind in ("int_type", "int_parsing"):
        return f"must be an integer (got {shown})"
    if kind in ("float_type", "float_parsing"):
        return f"must be a number (got {shown})"
    if kind in ("string_type", "str_type"):
        return f"must be a string (got {shown})"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false (got {shown})"
    if kind in ("list_type",):
        return f"must be an array (got {shown})"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be an object (got {shown})"
    return f"{err['msg'][0].lower()}{err['msg'][1:]} (got {shown})"


def _stop(value: str | list[str] | None) -> list[str]:
    stops = [value] if isinstance(value, str) else list(value or [])
    if len(stops) > MAX_STOP or any(len(s) > MAX_STOP_LEN for s in stops):
        raise APIError(400, f"Invalid 'stop': at most {MAX_STOP} strings of up to {MAX_STOP_LEN} characters.", "stop")
    return [s for s in stops if s]


def _logit_bias(value: dict[str, float] | None, n_vocab: int) -> dict[int, float]:
    out: dict[int, float] = {}
    for key, bias in (value or {}).items():
        if not key.lstrip("-").isdigit() or not 0 <= int(key) < n_vocab:
            raise APIError(400, f"Invalid 'logit_bias': {key!r} is not a token id of this model (0 to {n_vocab - 1}).",
                           "logit_bias")
        if not -100 <= bias <= 100:
            raise APIError(400, f"Invalid 'logit_bias': the bias of token {key} must be from -100 to 100 "
                                f"(got {bias}).", "logit_bias")
        out[int(key)] = float(bias)
    return out


def _spec(value: Speculative | None, default: SpecConfig) -> SpecConfig | None:
    if value is None:
        return None
    given = value.model_dump(exclude_none=True)
    try:
        return SpecConfig(**{**default.__dict__, **given})
    except InvalidRequest as exc:
        raise APIError(400, f"Invalid 'speculative': {exc.message}", "speculative") from None


class Picked(_Body):
    """The fields ``sampling`` and ``constraint`` read, from the APIs (Messages,
    Responses) whose requests carry them under other names or not at all."""

    temperature: Optional[float] = None
    top_p: Optional[float] = None
    top_k: Optional[int] = None
    min_p: Optional[float] = None
    repeat_penalty: Optional[float] = None
    presence_penalty: Optional[float] = None
    frequency_penalty: Optional[float] = None
    seed: Optional[int] = None
    logit_bias: Optional[dict[str, float]] = None
    grammar: Optional[str] = None
    response_format: Optional[Any] = None


def sampling(body: _Common | Picked, defaults: SamplingParams, n_vocab: int) -> SamplingParams:
    """The request's sampling over the server's defaults (flags, profile)."""
    pick = lambda name: getattr(body, name) if getattr(body, name) is not None else getattr(defaults, name)  # noqa: E731
    return SamplingParams(
        temperature=float(pick("temperature")), top_k=pick("top_k"), top_p=float(pick("top_p")),
        min_p=float(pick("min_p")), repeat_penalty=float(pick("repeat_penalty")),
        presence_penalty=float(pick("presence_penalty")), frequency_penalty=float(pick("frequency_penalty")),
        seed=pick("seed"), logit_bias=_logit_bias(body.logit_bias, n_vocab),
    )


def constraint(body: _Common | Picked) -> Constraint | None:
    """``response_format`` (json_object, json_schema) or the ``grammar`` extension."""
    fmt = body.response_format
    if body.grammar is not None and fmt is not None and fmt.type != "text":
        raise APIError(400, "Give 'response_format' or 'grammar', not both.", "grammar")
    try:
        if body.grammar is not None:
            kind = "lark" if body.grammar.lstrip().startswith("%llguidance") else "gbnf"
            return Constraint(kind, body.grammar)
        if fmt is None or fmt.type == "text":
            return None
        if fmt.type == "json_object":
            return Constraint("json_object")
        if fmt.json_schema is None or fmt.json_schema.schema_ is None:
            raise APIError(400, "Invalid 'response_format': a json_schema format needs json_schema.schema.",
                           "response_format")
        return Constraint("json_schema", json.dumps(fmt.json_schema.schema_))
    except InvalidRequest as exc:
        raise APIError(400, exc.message, "grammar" if body.grammar is not None else "response_format") from None


def max_tokens(value: int | None, default: int | None, param: str) -> int | None:
    if value is None:
        return default
    if value < 1:
        raise APIError(400, f"Invalid '{param}': must be at least 1 (got {value}).", param)
    return value


def chat_request(body: ChatRequest, defaults: SamplingParams, spec: SpecConfig, n_vocab: int,
                 default_max: int | None = None) -> Request:
    limit = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    param = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    return Request(
        messages=chat_messages(body.messages), sampling=sampling(body, defaults, n_vocab),
        max_tokens=max_tokens(limit, default_max, param), stop=_stop(body.stop), logprobs=body.logprobs,
        top_logprobs=body.top_logprobs or 0 if body.logprobs else 0, spec=_spec(body.speculative, spec),
        constraint=constraint(body), **tool_fields(body.tools, body.tool_choice, body.parallel_tool_calls),
    )


def chat_messages(messages: list[ChatMessage]) -> list[Message]:
    """Chat messages as the engine takes them; a tool message learns its function's name
    from the call it answers."""
    names: dict[str, str] = {}
    out = []
    for m in messages:
        calls = tuple(ToolCall(c.function.name, c.function.arguments, c.id or "") for c in m.tool_calls or ())
        names.update((c.id, c.name) for c in calls if c.id)
        role = "system" if m.role == "developer" else m.role
        name = names.get(m.tool_call_id or "", m.name) if m.role == "tool" else None
        out.append(Message(role, m.text(), tool_calls=calls, tool_call_id=m.tool_call_id, name=name))
    return out


def tool_fields(tools: list[ToolDef] | None, choice: Any, parallel: bool | None) -> dict[str, Any]:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls`` as engine Request fields."""
    defined = tuple(Tool(t.function.name, t.function.description or "",
                         t.function.parameters or {"type": "object", "properties": {}}) for t in tools or ())
    name = choice if isinstance(choice, str) or choice is None else choice.function.name
    if name not in (None, "auto", "none") and not defined:
        raise APIError(400, "Invalid 'tool_choice': there are no 'tools' to choose from.", "tool_choice")
    if not isinstance(choice, (str, type(None))) and name not in {t.name for t in defined}:
        raise APIError(400, f"Invalid 'tool_choice': no tool is named {name!r}.", "tool_choice")
    return {"tools": defined, "tool_choice": name or "auto",
            "parallel_tool_calls": True if parallel is None else parallel}


def completion_request(body: CompletionRequest, defaults: SamplingParams, spec: SpecConfig, n_vocab: int,
                       default_max: int | None = 16) -> Request:
    prompt = body.prompt
    text: str | None = None
    tokens: list[int] | None = None
    if isinstance(prompt, str):
        text = prompt
    elif prompt and all(isinstance(p, str) for p in prompt):
        if len(prompt) != 1:
            raise APIError(400, "Invalid 'prompt': give one prompt per request.", "prompt")
        text = prompt[0]
    elif prompt:
        if any(not 0 <= t < n_vocab for t in prompt):
            raise APIError(400, f"Invalid 'prompt': token ids must be from 0 to {n_vocab - 1}.", "prompt")
        tokens = list(prompt)
    if not tokens and not (text and text.strip()):
        raise APIError(400, "Invalid 'prompt': the prompt is empty.", "prompt")
    return Request(
        prompt=text, prompt_tokens=tokens, sampling=sampling(body, defaults, n_vocab),
        max_tokens=max_tokens(body.max_tokens, default_max, "max_tokens"), stop=_stop(body.stop),
        logprobs=body.logprobs is not None, top_logprobs=body.logprobs or 0, spec=_spec(body.speculative, spec),
        constraint=constraint(body),
    )


# ------------------------------------------------------------------ responses


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def finish_reason(reason: FinishReason, reply: Reply | None = None) -> str:
    """OpenAI's names: an answer that calls tools is "tool_calls"; a stop string or the
    model's end is "stop"; a cancelled request (the server shutting down) ends as "stop"
    too, with what it had."""
    if reply is not None and reply.calls and (reason is not FinishReason.LENGTH or reply.repeated):
        return "tool_calls"
    return "length" if reason is FinishReason.LENGTH else "stop"


def call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def message(reply: Reply) -> dict[str, Any]:
    """The assistant message of a chat completion: its text (None when it only calls
    tools), its reasoning, its tool calls."""
    out: dict[str, Any] = {"role": "assistant", "content": reply.content or (None if reply.calls else "")}
    if reply.reasoning:
        out["reasoning_content"] = reply.reasoning
    if reply.calls:
        out["tool_calls"] = [{"id": call_id(), "type": "function",
                              "function": {"name": c.name, "arguments": c.arguments}} for c in reply.calls]
    return out


def delta(part: Delta, ids: dict[int, str]) -> dict[str, Any]:
    """A streamed chunk's ``delta`` for one piece of the answer (a call's first piece
    carries its id, type and name; later ones, more of its arguments)."""
    if part.kind == "reasoning":
        return {"reasoning_content": part.text}
    if part.kind == "content":
        return {"content": part.text}
    call: dict[str, Any] = {"index": part.index, "function": {"arguments": part.text}}
    if part.name is not None:
        ids[part.index] = call_id()
        call.update(id=ids[part.index], type="function")
        call["function"]["name"] = part.name
    return {"tool_calls": [call]}


def usage(results: list[Result]) -> dict[str, Any]:
    """The prompt once (the choices share it), the completions of every choice."""
    first = results[0].usage
    completion = sum(r.usage.completion_tokens for r in results)
    return {"prompt_tokens": first.prompt_tokens, "completion_tokens": completion,
            "total_tokens": first.prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": first.cached_tokens}}


def extensions(results: list[Result]) -> dict[str, Any]:
    """localspec's additions: what speculation did, and llama-server-style timings."""
    first = results[0]
    specs = [r.spec for r in results if r.spec is not None]
    drafted, accepted = sum(s.drafted for s in specs), sum(s.accepted for s in specs)
    ran = sorted({s.mode for s in specs if s.mode != "off"})
    prompt_n = first.usage.prompt_tokens - first.usage.cached_tokens
    prompt_s = first.timings.prompt_s
    predicted = sum(r.usage.completion_tokens for r in results)
    decode_s = max(r.timings.decode_s for r in results)
    decoded = sum(r.timings.decode_tokens for r in results)
    return {
        "speculative": {"mode": "+".join(ran) if ran else "off", "drafted": drafted, "accepted": accepted,
                        "acceptance_rate": round(accepted / drafted, 4) if drafted else 0.0},
        "timings": {
            "prompt_n": prompt_n, "prompt_ms": round(prompt_s * 1e3, 3),
            "prompt_per_second": round(prompt_n / prompt_s, 3) if prompt_s > 0 else 0.0,
            "predicted_n": predicted, "predicted_ms": round(decode_s * 1e3, 3),
            "predicted_per_second": round(decoded / decode_s, 3) if decode_s > 0 else 0.0,
        },
    }


class LogprobFormatter:
    """Token ids -> the logprob entries each API shows (text of each token, its bytes)."""

    def __init__(self, piece) -> None:
        self._piece = piece  # token id -> bytes

    def chat_entry(self, event: TokenEvent) -> dict[str, Any]:
        raw = self._piece(event.token_id)
        return {"token": raw.decode("utf-8", "replace"), "logprob": event.logprob, "bytes": list(raw),
                "top_logprobs": [{"token": self._piece(t).decode("utf-8", "replace"), "logprob": lp,
                                  "bytes": list(self._piece(t))} for t, lp in event.top_logprobs]}

    def completion_entry(self, event: TokenEvent) -> tuple[str, float | None, dict[str, float]]:
        text = self._piece(event.token_id).decode("utf-8", "replace")
        tops = {self._piece(t).decode("utf-8", "replace"): lp for t, lp in event.top_logprobs}
        return text, event.logprob, tops


def chat_response(rid: str, model: str, results: list[Result], logprobs: list[list[dict] | None],
                  replies: list[Reply]) -> dict[str, Any]:
    return {
        "id": rid, "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": i, "message": message(reply), "logprobs": {"content": lp} if lp is not None else None,
                     "finish_reason": finish_reason(r.finish_reason, reply)}
                    for i, (r, lp, reply) in enumerate(zip(results, logprobs, replies))],
        "usage": usage(results), **extensions(results),
    }


def chat_chunk(rid: str, model: str, created: int, delta: dict[str, Any], finish: str | None = None,
               logprobs: list[dict] | None = None, index: int = 0) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
    if logprobs is not None:
        choice["logprobs"] = {"content": logprobs}
    return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [choice]}


def completion_logprobs(entries: list[tuple[str, float | None, dict[str, float]]], start: int = 0) -> dict[str, Any]:
    offsets, at = [], start
    for text, _, _ in entries:
        offsets.append(at)
        at += len(text)
    return {"tokens": [e[0] for e in entries], "token_logprobs": [e[1] for e in entries],
            "top_logprobs": [e[2] for e in entries], "text_offset": offsets}


def completion_response(rid: str, model: str, results: list[Result], logprobs: list[dict | None]) -> dict[str, Any]:
    return {
        "id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
        "choices": [{"index": i, "text": r.text, "logprobs": lp, "finish_reason": finish_reason(r.finish_reason)}
                    for i, (r, lp) in enumerate(zip(results, logprobs))],
        "usage": usage(results), **extensions(results),
    }


def completion_chunk(rid: str, model: str, created: int, text: str, finish: str | None = None,
                     logprobs: dict | None = None, index: int = 0) -> dict[str, Any]:
    return {"id": rid, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}]}


def usage_chunk(rid: str, model: str, created: int, obj: str, results: list[Result]) -> dict[str, Any]:
    return {"id": rid, "object": obj, "created": created, "model": model, "choices": [],
            "usage": usage(results), **extensions(results)}


# ---------------------------------------------------------------------------- embeddings

MAX_EMBEDDING_INPUTS = 2048  # OpenAI's own limit on inputs per request


class EmbeddingRequest(_Body):
    model: Optional[StrictStr] = None
    input: Union[StrictStr, list[StrictStr], list[StrictInt], list[list[StrictInt]]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Optional[StrictInt] = None
    user: Optional[StrictStr] = None
    keep_alive: Union[StrictStr, StrictInt, StrictFloat, None] = None  # extension: Ollama's


def embedding_inputs(body: EmbeddingRequest) -> list[str | list[int]]:
    """The request's inputs as texts or token-id lists; 400 naming ``input`` where one is
    empty or there are none or too many."""
    raw = body.input
    inputs: list[str | list[int]]
    if isinstance(raw, str):
        inputs = [raw]
    elif raw and all(isinstance(x, int) for x in raw):
        inputs = [list(raw)]  # type: ignore[arg-type]
    else:
        inputs = list(raw)  # type: ignore[arg-type]
    if not inputs:
        raise APIError(400, "Invalid 'input': give a string, a list of strings or token ids, not an empty list.", "input")
    if len(inputs) > MAX_EMBEDDING_INPUTS:
        raise APIError(400, f"Invalid 'input': at most {MAX_EMBEDDING_INPUTS} inputs per request, not {len(inputs)}.",
                       "input")
    for i, x in enumerate(inputs):
        if len(x) == 0:
            where = "'input'" if len(inputs) == 1 else f"'input[{i}]'"
            raise APIError(400, f"Invalid {where}: it is empty.", "input")
    return inputs


def embedding_response(model: str, vectors: list[Any], n_tokens: int, encoding_format: str) -> dict[str, Any]:
    """OpenAI's embedding list; base64 is the little-endian float32 bytes the SDKs decode."""
    import base64

    import numpy as np

    def encode(v: Any) -> Any:
        if encoding_format == "base64":
            return base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode("ascii")
        return [float(x) for x in v]

    return {"object": "list", "model": model,
            "data": [{"object": "embedding", "index": i, "embedding": encode(v)} for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}}
