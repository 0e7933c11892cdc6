"""The Anthropic Messages API's shapes (``POST /v1/messages``), as pure converters:
request JSON -> the same engine Request chat completions make, results and events ->
Anthropic's message, stream events and error shape. No FastAPI here.

Text, tool_use and tool_result blocks and ``tools`` are taken; other blocks (images,
documents) and Anthropic's own server tools are refused with a 400 that says so, never
silently dropped.
"""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr

from localspec.server.openai import (APIError, Number, Picked, Speculative, _Body, _spec, _stop, constraint,
                                     max_tokens, sampling)
from localspec.reply import Delta, Reply
from localspec.types import FinishReason, Message, Request, Result, SamplingParams, SpecConfig, Tool, ToolCall

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


class ToolParam(_Body):
    name: StrictStr
    description: Optional[StrictStr] = None
    input_schema: dict[str, Any]
    type: Optional[Literal["custom"]] = None  # Anthropic's own server tools (bash, web search) are not run here


class ToolChoice(_Body):
    type: Literal["auto", "any", "tool", "none"]
    name: Optional[StrictStr] = None
    disable_parallel_tool_use: Optional[StrictBool] = None


class MessageParam(_Body):
    role: Literal["user", "assistant"]
    content: Union[StrictStr, list[dict[str, Any]]]

    def messages(self, names: dict[str, str]) -> list[Message]:
        """This message as engine messages: a user's tool_result blocks become tool
        messages (before its text), an assistant's tool_use blocks its tool calls."""
        if isinstance(self.content, str):
            return [Message(self.role, self.content)]
        texts: list[str] = []
        calls: list[ToolCall] = []
        results: list[Message] = []
        for i, block in enumerate(self.content):
            kind = block.get("type") if isinstance(block, dict) else None
            where = f"messages: content block {i}"
            if kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind in ("thinking", "redacted_thinking") and self.role == "assistant":
                continue  # earlier reasoning is not sent back to the model
            elif kind == "tool_use" and self.role == "assistant":
                if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str) \
                        or not isinstance(block.get("input"), dict):
                    raise APIError(400, f"{where}: a tool_use block needs an id, a name and an input object.", "messages")
                names[block["id"]] = block["name"]
                calls.append(ToolCall(block["name"], json.dumps(block["input"], ensure_ascii=False), block["id"]))
            elif kind == "tool_result" and self.role == "user":
                if not isinstance(block.get("tool_use_id"), str):
                    raise APIError(400, f"{where}: a tool_result block needs a tool_use_id.", "messages")
                content = _result_text(block.get("content"), where)
                if block.get("is_error"):
                    content = f"Error: {content}"
                results.append(Message("tool", content, tool_call_id=block["tool_use_id"],
                                       name=names.get(block["tool_use_id"])))
            else:
                raise APIError(400, f"{where}: blocks of type {kind!r} are not supported in a {self.role} message "
                                    "(text, tool_use and tool_result are).", "messages")
        text = "".join(texts)
        own = [Message(self.role, text, tool_calls=tuple(calls))] if text or calls else []
        return results + own


def _result_text(content: Any, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(isinstance(b, dict) and b.get("type") == "text"
                                         and isinstance(b.get("text"), str) for b in content):
        return "".join(b["text"] for b in content)
    raise APIError(400, f"{where}: a tool_result's content must be text.", "messages")


class MessagesRequest(_Body):
    model: Optional[StrictStr] = None
    keep_alive: Union[StrictStr, StrictInt, StrictFloat, None] = None  # extension: Ollama's
    max_tokens: StrictInt
    messages: Annotated[list[MessageParam], Field(min_length=1)]
    system: Union[StrictStr, list[TextBlock], None] = None
    stop_sequences: Optional[list[StrictStr]] = None
    temperature: Optional[Annotated[Number, Field(ge=0, le=1)]] = None
    top_p: Optional[Annotated[Number, Field(gt=0, le=1)]] = None
    top_k: Optional[Annotated[StrictInt, Field(ge=0)]] = None
    stream: bool = False
    tools: Optional[list[ToolParam]] = None
    tool_choice: Optional[ToolChoice] = None
    speculative: Optional[Speculative] = None  # extension, as in chat completions
    grammar: Optional[StrictStr] = None  # extension, as in chat completions


def to_request(body: MessagesRequest, defaults: SamplingParams, spec: SpecConfig, n_vocab: int) -> Request:
    system = body.system if isinstance(body.system, str) or body.system is None else "".join(b.text for b in body.system)
    names: dict[str, str] = {}
    messages = [Message("system", system)] if system else []
    for m in body.messages:
        messages += m.messages(names)
    tools = tuple(Tool(t.name, t.description or "", t.input_schema) for t in body.tools or ())
    choice = body.tool_choice
    name = {"auto": "auto", "any": "required", "none": "none"}.get(choice.type, choice.name) if choice else "auto"
    if choice is not None and choice.type == "tool" and name not in {t.name for t in tools}:
        raise APIError(400, f"tool_choice: no tool is named {name!r}.", "tool_choice")
    if choice is not None and choice.type in ("any", "tool") and not tools:
        raise APIError(400, "tool_choice: there are no tools to choose from.", "tool_choice")
    picked = Picked(temperature=body.temperature, top_p=body.top_p, top_k=body.top_k, grammar=body.grammar)
    return Request(messages=messages, sampling=sampling(picked, defaults, n_vocab), constraint=constraint(picked),
                   max_tokens=max_tokens(body.max_tokens, None, "max_tokens"), stop=_stop(body.stop_sequences),
                   spec=_spec(body.speculative, spec), tools=tools, tool_choice=name or "auto",
                   parallel_tool_calls=not (choice and choice.disable_parallel_tool_use))


def new_id() -> str:
    return "msg_" + uuid.uuid4().hex[:24]


def stop_reason(result: Result, reply: Reply) -> str:
    if reply.calls and (result.finish_reason is not FinishReason.LENGTH or reply.repeated):
        return "tool_use"
    return {FinishReason.STOP: "stop_sequence", FinishReason.LENGTH: "max_tokens"}.get(result.finish_reason, "end_turn")


def stop_sequence(result: Result, stops: list[str]) -> str | None:
    """Which stop sequence ended the answer (the engine does not say: the one that can
    be told from the text is the only one given)."""
    return stops[0] if result.finish_reason is FinishReason.STOP and len(stops) == 1 else None


def tool_use_id() -> str:
    return "toolu_" + uuid.uuid4().hex[:24]


def message(mid: str, model: str, result: Result, reply: Reply, stops: list[str]) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reply.reasoning:
        content.append({"type": "thinking", "thinking": reply.reasoning, "signature": ""})
    if reply.content or not reply.calls:
        content.append({"type": "text", "text": reply.content})
    content += [{"type": "tool_use", "id": tool_use_id(), "name": c.name, "input": json.loads(c.arguments)}
                for c in reply.calls]
    return {"id": mid, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop_reason(result, reply), "stop_sequence": stop_sequence(result, stops),
            "usage": {"input_tokens": result.usage.prompt_tokens, "output_tokens": result.usage.completion_tokens}}


def start_event(mid: str, model: str, input_tokens: int) -> tuple[str, dict[str, Any]]:
    return ("message_start", {"type": "message_start", "message": {
        "id": mid, "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": None,
        "stop_sequence": None, "usage": {"input_tokens": input_tokens, "output_tokens": 0}}})


class Blocks:
    """Deltas of an answer -> Anthropic's content block events: a block opens when a new
    kind of piece begins (thinking, text, each tool_use) and closes when the next opens."""

    def __init__(self) -> None:
        self.index = -1
        self.open: tuple[str, int] | None = None

    def events(self, part: Delta) -> list[tuple[str, dict[str, Any]]]:
        out = []
        key = (part.kind, part.index if part.kind == "call" else 0)
        if key != self.open:
            out += self._close()
            self.index += 1
            self.open = key
            block: dict[str, Any] = {"reasoning": {"type": "thinking", "thinking": "", "signature": ""},
                                     "content": {"type": "text", "text": ""}}.get(part.kind) or \
                {"type": "tool_use", "id": tool_use_id(), "name": part.name or "", "input": {}}
            out.append(("content_block_start", {"type": "content_block_start", "index": self.index,
                                                "content_block": block}))
        if part.text:
            delta = {"reasoning": {"type": "thinking_delta", "thinking": part.text},
                     "content": {"type": "text_delta", "text": part.text}}.get(part.kind) or \
                {"type": "input_json_delta", "partial_json": part.text}
            out.append(("content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta}))
        return out

    def end(self, result: Result, reply: Reply, stops: list[str]) -> list[tuple[str, dict[str, Any]]]:
        out = [] if self.index >= 0 else self.events(Delta("content"))  # an empty answer: one empty text block
        out += self._close()
        out += [("message_delta", {"type": "message_delta",
                                   "delta": {"stop_reason": stop_reason(result, reply),
                                             "stop_sequence": stop_sequence(result, stops)},
                                   "usage": {"output_tokens": result.usage.completion_tokens}}),
                ("message_stop", {"type": "message_stop"})]
        return out

    def _close(self) -> list[tuple[str, dict[str, Any]]]:
        if self.open is None:
            return []
        self.open = None
        return [("content_block_stop", {"type": "content_block_stop", "index": self.index})]
