"""OpenAI's Responses API's shapes (``POST /v1/responses``), as pure converters: request
JSON -> the same engine Request chat completions make, a parsed answer -> the response
object and its stream of events. No FastAPI here.

The server keeps no state: ``store`` is answered false and ``previous_response_id`` (or an
``item_reference``) is refused with a 400 saying so; a client sends the whole
conversation as input items, as stateless Responses clients do.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr

from localspec.reply import Delta, Reply
from localspec.server.openai import (
    APIError,
    FunctionDef,
    JsonSchemaFormat,
    NamedToolChoice,
    Number,
    Picked,
    ResponseFormat,
    Speculative,
    ToolDef,
    _Body,
    _Named,
    _spec,
    constraint,
    max_tokens,
    sampling,
    tool_fields,
)
from localspec.types import FinishReason, Message, Request, Result, SamplingParams, SpecConfig, ToolCall


class TextFormat(_Body):
    type: Literal["text", "json_object", "json_schema"]
    name: Optional[StrictStr] = None
    schema_: Optional[dict[str, Any]] = Field(default=None, alias="schema")
    strict: Optional[StrictBool] = None


class TextConfig(_Body):
    format: Optional[TextFormat] = None


class FunctionTool(_Body):
    """A function tool as the Responses API gives it: chat completions' definition, flat
    (``type`` first, so that another kind of tool is named as such)."""

    type: Literal["function"]
    name: StrictStr
    description: Optional[StrictStr] = None
    parameters: Optional[dict[str, Any]] = None
    strict: Optional[StrictBool] = None


class NamedFunction(_Body):
    type: Literal["function"]
    name: StrictStr


class ResponsesRequest(_Body):
    model: Optional[StrictStr] = None
    keep_alive: Union[StrictStr, StrictInt, StrictFloat, None] = None  # extension: Ollama's
    input: Union[StrictStr, list[dict[str, Any]]]
    instructions: Optional[StrictStr] = None
    tools: Optional[list[FunctionTool]] = None
    tool_choice: Union[Literal["auto", "none", "required"], NamedFunction, None] = None
    parallel_tool_calls: Optional[StrictBool] = None
    max_output_tokens: Optional[StrictInt] = None
    temperature: Optional[Annotated[Number, Field(ge=0, le=2)]] = None
    top_p: Optional[Annotated[Number, Field(gt=0, le=1)]] = None
    text: Optional[TextConfig] = None
    stream: StrictBool = False
    store: Optional[StrictBool] = None
    previous_response_id: Optional[StrictStr] = None
    metadata: Optional[dict[str, StrictStr]] = None
    speculative: Optional[Speculative] = None  # extension, as in chat completions
    grammar: Optional[StrictStr] = None  # extension, as in chat completions


def to_request(body: ResponsesRequest, defaults: SamplingParams, spec: SpecConfig, n_vocab: int,
               default_max: int | None) -> Request:
    if body.previous_response_id is not None:
        raise APIError(400, "'previous_response_id' is not supported: this server stores no responses; send the "
                            "whole conversation as input items.", "previous_response_id")
    messages = ([Message("system", body.instructions)] if body.instructions else []) + input_messages(body.input)
    fields = Picked(temperature=body.temperature, top_p=body.top_p, response_format=_format(body.text),
                    grammar=body.grammar)
    tools = [ToolDef(type="function", function=FunctionDef(name=t.name, description=t.description,
                                                           parameters=t.parameters)) for t in body.tools or ()]
    choice = body.tool_choice
    if isinstance(choice, NamedFunction):
        choice = NamedToolChoice(type="function", function=_Named(name=choice.name))
    return Request(messages=messages, sampling=sampling(fields, defaults, n_vocab),
                   max_tokens=max_tokens(body.max_output_tokens, default_max, "max_output_tokens"),
                   spec=_spec(body.speculative, spec), constraint=constraint(fields),
                   **tool_fields(tools, choice, body.parallel_tool_calls))


def _format(text: TextConfig | None) -> Any:
    """``text.format`` in chat completions' ``response_format`` shape."""
    fmt = text.format if text is not None else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return ResponseFormat(type="json_object")
    if fmt.schema_ is None:
        raise APIError(400, "Invalid 'text.format': a json_schema format needs a schema.", "text.format")
    return ResponseFormat(type="json_schema", json_schema=JsonSchemaFormat(name=fmt.name, schema=fmt.schema_))


def input_messages(items: str | list[dict[str, Any]]) -> list[Message]:
    """Input items -> engine messages: a run of function_call items is one assistant
    message with those calls; a function_call_output is a tool message."""
    if isinstance(items, str):
        return [Message("user", items)]
    out: list[Message] = []
    names: dict[str, str] = {}
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise APIError(400, f"Invalid '{where}': an input item must be an object.", where)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise APIError(400, f"Invalid '{where}.role': must be user, assistant, system or developer.",
                               f"{where}.role")
            out.append(Message("system" if role == "developer" else role, _text(item.get("content"), where)))
        elif kind == "function_call":
            call_id, name, args = item.get("call_id"), item.get("name"), item.get("arguments")
            if not all(isinstance(x, str) for x in (call_id, name, args)):
                raise APIError(400, f"Invalid '{where}': a function_call needs call_id, name and arguments "
                                    "(strings).", where)
            names[call_id] = name
            call = ToolCall(name, args, call_id)
            if out and out[-1].role == "assistant":
                last = out[-1]
                out[-1] = Message("assistant", last.content, tool_calls=last.tool_calls + (call,))
            else:
                out.append(Message("assistant", "", tool_calls=(call,)))
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise APIError(400, f"Invalid '{where}': a function_call_output needs a call_id.", where)
            out.append(Message("tool", _text(item.get("output"), where), tool_call_id=call_id,
                               name=names.get(call_id)))
        elif kind == "reasoning":
            continue  # earlier reasoning is not sent back to the model
        elif kind == "item_reference":
            raise APIError(400, f"Invalid '{where}': item references need stored responses, which this server "
                                "does not keep.", where)
        else:
            raise APIError(400, f"Invalid '{where}': input items of type {kind!r} are not supported (message, "
                                "function_call and function_call_output are).", where)
    return out


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in ("input_text", "output_text", "text") \
                    or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise APIError(400, f"Invalid '{where}.content': parts of type {kind!r} are not supported "
                                    "(text only).", f"{where}.content")
            parts.append(part["text"])
        return "".join(parts)
    raise APIError(400, f"Invalid '{where}.content': must be a string or a list of text parts.", f"{where}.content")


# ------------------------------------------------------------------ output


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [] if status == "in_progress" else [_text_part(text)]
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def call_item(item_id: str, call_id: str, name: str, arguments: str, status: str = "completed") -> dict[str, Any]:
    return {"type": "function_call", "id": item_id, "call_id": call_id, "name": name, "arguments": arguments,
            "status": status}


def reasoning_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [] if status == "in_progress" else [{"type": "reasoning_text", "text": text}]
    return {"type": "reasoning", "id": item_id, "summary": [], "content": content, "status": status}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def output(reply: Reply) -> list[dict[str, Any]]:
    items = [reasoning_item(new_id("rs"), reply.reasoning)] if reply.reasoning else []
    if reply.content or not reply.calls:
        items.append(message_item(new_id("msg"), reply.content))
    items += [call_item(new_id("fc"), new_id("call"), c.name, c.arguments) for c in reply.calls]
    return items


def response(rid: str, model: str, body: ResponsesRequest, request: Request, items: list[dict[str, Any]],
             result: Result | None = None, reply: Reply | None = None) -> dict[str, Any]:
    """The response object: in progress (no result yet) or ended."""
    status, incomplete = "in_progress", None
    if result is not None:
        status = "completed"
        if result.finish_reason is FinishReason.LENGTH and not (reply and reply.calls):
            status, incomplete = "incomplete", {"reason": "max_output_tokens"}
    choice = request.tool_choice
    return {
        "id": rid, "object": "response", "created_at": int(time.time()), "status": status, "model": model,
        "output": items, "error": None, "incomplete_details": incomplete, "instructions": body.instructions,
        "metadata": body.metadata or {}, "temperature": request.sampling.temperature, "top_p": request.sampling.top_p,
        "max_output_tokens": body.max_output_tokens, "previous_response_id": None,
        "parallel_tool_calls": request.parallel_tool_calls,
        "tool_choice": choice if choice in ("auto", "none", "required") else {"type": "function", "name": choice},
        "tools": [t.model_dump(exclude_none=True) for t in body.tools or ()],
        "text": {"format": body.text.format.model_dump(by_alias=True, exclude_none=True)
                 if body.text and body.text.format else {"type": "text"}},
        "reasoning": {"effort": None, "summary": None}, "store": False, "truncation": "disabled", "user": None,
        "usage": None if result is None else usage(result, reply),
    }


def usage(result: Result, reply: Reply | None) -> dict[str, Any]:
    u = result.usage
    return {"input_tokens": u.prompt_tokens, "input_tokens_details": {"cached_tokens": u.cached_tokens,
                                                                      "cache_write_tokens": 0},
            "output_tokens": u.completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u.total_tokens}


class Events:
    """Deltas of an answer -> the Responses API's stream events, numbered: an output item
    opens when a new kind of piece begins (reasoning, text, each function call) and is
    done when the next opens or the answer ends."""

    def __init__(self) -> None:
        self.seq = 0
        self.items: list[dict[str, Any]] = []  # finished
        self.open: dict[str, Any] | None = None
        self.key: tuple[str, int] | None = None
        self.text = ""

    def event(self, kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
        data = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return kind, data

    def feed(self, part: Delta) -> list[tuple[str, dict[str, Any]]]:
        out = []
        key = (part.kind, part.index if part.kind == "call" else 0)
        if key != self.key:
            out += self._done()
            out += self._added(part)
            self.key = key
        if part.text:
            self.text += part.text
            at = {"item_id": self.open["id"], "output_index": len(self.items)}
            if part.kind == "content":
                out.append(self.event("response.output_text.delta", **at, content_index=0, delta=part.text,
                                      logprobs=[]))
            elif part.kind == "reasoning":
                out.append(self.event("response.reasoning_text.delta", **at, content_index=0, delta=part.text))
            else:
                out.append(self.event("response.function_call_arguments.delta", **at, delta=part.text))
        return out

    def end(self) -> list[tuple[str, dict[str, Any]]]:
        """Close the last item (an answer with none gets one empty message)."""
        out = [] if self.key is not None or self.items else self._added(Delta("content"))
        return out + self._done()

    def _added(self, part: Delta) -> list[tuple[str, dict[str, Any]]]:
        self.text = ""
        index = len(self.items)
        if part.kind == "content":
            self.open = message_item(new_id("msg"), "", "in_progress")
            return [self.event("response.output_item.added", output_index=index, item=self.open),
                    self.event("response.content_part.added", item_id=self.open["id"], output_index=index,
                               content_index=0, part=_text_part(""))]
        if part.kind == "reasoning":
            self.open = reasoning_item(new_id("rs"), "", "in_progress")
        else:
            self.open = call_item(new_id("fc"), new_id("call"), part.name or "", "", "in_progress")
        return [self.event("response.output_item.added", output_index=index, item=self.open)]

    def _done(self) -> list[tuple[str, dict[str, Any]]]:
        if self.open is None:
            return []
        item, text, index = self.open, self.text, len(self.items)
        at = {"item_id": item["id"], "output_index": index}
        out = []
        if item["type"] == "message":
            item = message_item(item["id"], text)
            out += [self.event("response.output_text.done", **at, content_index=0, text=text, logprobs=[]),
                    self.event("response.content_part.done", **at, content_index=0, part=_text_part(text))]
        elif item["type"] == "reasoning":
            item = reasoning_item(item["id"], text)
            out.append(self.event("response.reasoning_text.done", **at, content_index=0, text=text))
        else:
            item = call_item(item["id"], item["call_id"], item["name"], text)
            out.append(self.event("response.function_call_arguments.done", **at, arguments=text))
        out.append(self.event("response.output_item.done", output_index=index, item=item))
        self.items.append(item)
        self.open = self.key = None
        return out
