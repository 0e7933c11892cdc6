"""The Anthropic Messages API's shapes (``POST /v1/messages``), as pure converters:
request JSON -> the same engine Request chat completions make, results and events ->
Anthropic's message, stream events and error shape. No FastAPI here.

Text content only for now: ``tools`` and content blocks other than text (images,
tool_use, tool_result) are refused with a 400 that says so, never silently dropped.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Field, StrictInt, StrictStr

from localspec.server.openai import APIError, Number, _Body, _spec, _stop, max_tokens, sampling, Speculative
from localspec.types import FinishReason, Message, Request, Result, SamplingParams, SpecConfig

PATH = "/v1/messages"
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large",
               429: "rate_limit_error", 500: "api_error", 503: "overloaded_error"}


def error_body(error: APIError) -> dict[str, Any]:
    """An APIError in Anthropic's shape: ``{"type": "error", "error": {type, message}}``."""
    return {"type": "error", "error": {"type": ERROR_TYPES.get(error.status, "invalid_request_error"),
                                       "message": error.message}}


def is_messages(path: str) -> bool:
    return path.rstrip("/") in (PATH, "/v1/messages/count_tokens")


class TextBlock(_Body):
    type: Literal["text"]
    text: StrictStr


class MessageParam(_Body):
    role: Literal["user", "assistant"]
    content: Union[StrictStr, list[dict[str, Any]]]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        parts = []
        for i, block in enumerate(self.content):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind != "text":
                raise APIError(400, f"messages: content blocks of type {kind!r} are not supported yet "
                                    "(text only).", "messages")
            if not isinstance(block.get("text"), str):
                raise APIError(400, f"messages: content block {i} has no text.", "messages")
            parts.append(block["text"])
        return "".join(parts)


class MessagesRequest(_Body):
    model: Optional[StrictStr] = None
    max_tokens: StrictInt
    messages: Annotated[list[MessageParam], Field(min_length=1)]
    system: Union[StrictStr, list[TextBlock], None] = None
    stop_sequences: Optional[list[StrictStr]] = None
    temperature: Optional[Annotated[Number, Field(ge=0, le=1)]] = None
    top_p: Optional[Annotated[Number, Field(gt=0, le=1)]] = None
    top_k: Optional[Annotated[StrictInt, Field(ge=0)]] = None
    stream: bool = False
    tools: Optional[list[dict[str, Any]]] = None
    speculative: Optional[Speculative] = None  # extension, as in chat completions


class _Sampling(_Body):
    """The fields ``openai.sampling`` reads, from a Messages request."""

    temperature: Optional[float] = None
    top_p: Optional[float] = None
    top_k: Optional[int] = None
    min_p: Optional[float] = None
    repeat_penalty: Optional[float] = None
    presence_penalty: Optional[float] = None
    frequency_penalty: Optional[float] = None
    seed: Optional[int] = None
    logit_bias: Optional[dict[str, float]] = None


def to_request(body: MessagesRequest, defaults: SamplingParams, spec: SpecConfig, n_vocab: int) -> Request:
    if body.tools:
        raise APIError(400, "'tools' is not supported yet on /v1/messages.", "tools")
    system = body.system if isinstance(body.system, str) or body.system is None else "".join(b.text for b in body.system)
    messages = ([Message("system", system)] if system else []) + [Message(m.role, m.text()) for m in body.messages]
    picked = _Sampling(temperature=body.temperature, top_p=body.top_p, top_k=body.top_k)
    return Request(messages=messages, sampling=sampling(picked, defaults, n_vocab),  # type: ignore[arg-type]
                   max_tokens=max_tokens(body.max_tokens, None, "max_tokens"), stop=_stop(body.stop_sequences),
                   spec=_spec(body.speculative, spec))


def new_id() -> str:
    return "msg_" + uuid.uuid4().hex[:24]


def stop_reason(result: Result) -> str:
    return {FinishReason.STOP: "stop_sequence", FinishReason.LENGTH: "max_tokens"}.get(result.finish_reason, "end_turn")


def stop_sequence(result: Result, stops: list[str]) -> str | None:
    """Which stop sequence ended the answer (the engine does not say: the one that can
    be told from the text is the only one given)."""
    return stops[0] if result.finish_reason is FinishReason.STOP and len(stops) == 1 else None


def message(mid: str, model: str, result: Result, stops: list[str]) -> dict[str, Any]:
    return {"id": mid, "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": result.text}], "stop_reason": stop_reason(result),
            "stop_sequence": stop_sequence(result, stops),
            "usage": {"input_tokens": result.usage.prompt_tokens, "output_tokens": result.usage.completion_tokens}}


def start_events(mid: str, model: str, input_tokens: int) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("message_start", {"type": "message_start", "message": {
            "id": mid, "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": None,
            "stop_sequence": None, "usage": {"input_tokens": input_tokens, "output_tokens": 0}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
    ]


def delta_event(text: str) -> tuple[str, dict[str, Any]]:
    return "content_block_delta", {"type": "content_block_delta", "index": 0,
                                   "delta": {"type": "text_delta", "text": text}}


def end_events(result: Result, stops: list[str]) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop_reason(result),
                                                              "stop_sequence": stop_sequence(result, stops)},
                           "usage": {"output_tokens": result.usage.completion_tokens}}),
        ("message_stop", {"type": "message_stop"}),
    ]
