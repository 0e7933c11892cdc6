"""Tool calls in a model's answer, by the tool-call syntax of its chat template's family.

Each family writes calls its own way: Hermes and Qwen2.5 in ``<tool_call>{...}</tool_call>``
tags, Llama 3.1-3.3 as a JSON object with ``name`` and ``parameters`` (after
``<|python_tag|>`` or alone), Mistral after ``[TOOL_CALLS]`` (a JSON list, or
``name[ARGS]{...}`` in newer templates). The family is read from the template's text;
a template that names none is "generic": a JSON object with ``name`` and ``arguments``
(or a list of them, or ``{"tool_calls": [...]}``), alone or in a fenced block. Small
models often answer in that generic form whatever their template says (Qwen2.5-Coder-0.5B
writes bare JSON without the tags), so every family also takes it.

A call that cannot be read (bad JSON, no name, a function that was not offered) leaves
the whole answer as text: it is returned as content, never an error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from localspec.types import Tool, ToolCall

FAMILIES = ("hermes", "llama3", "mistral", "generic")
_FENCE = re.compile(r"^```(?:json)?\s*\n(.*?)\n?```$", re.DOTALL)
_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_MISTRAL_NEW = re.compile(r"\[TOOL_CALLS\]\s*([A-Za-z_][\w.-]*)\s*\[ARGS\]\s*")


@dataclass(frozen=True)
class Parsed:
    content: str  # the answer's text outside the calls ("" when it was only calls)
    calls: tuple[ToolCall, ...] = ()


def family(template: str | None) -> str:
    """The tool-call syntax a chat template teaches its model (documented fallback:
    generic)."""
    text = template or ""
    if "<tool_call>" in text:
        return "hermes"
    if "[TOOL_CALLS]" in text:
        return "mistral"
    if "<|python_tag|>" in text or ("<|start_header_id|>" in text and "parameters" in text):
        return "llama3"
    return "generic"


def parse(text: str, family: str, names: set[str] | None = None) -> Parsed:
    """The calls in ``text`` written in ``family``'s syntax (or the generic one), each
    naming one of ``names`` when given; else the text as it is."""
    if family not in FAMILIES:
        raise ValueError(f"unknown tool-call family {family!r}")
    calls: list[ToolCall] | None = None
    content = ""
    if family == "hermes" and "<tool_call>" in text:
        content = _HERMES.sub("", text).strip()
        calls = _objects([m.group(1) for m in _HERMES.finditer(text)])
    elif family == "mistral" and "[TOOL_CALLS]" in text:
        content, calls = _mistral(text)
    elif family == "llama3" and "<|python_tag|>" in text:
        before, _, after = text.partition("<|python_tag|>")
        content = before.strip()
        calls = _objects([part for part in re.split(r";\s*(?=\{)", after.strip()) if part.strip()])
    if calls is None:
        content, calls = "", _generic(text)
    if not calls or any(not _valid(c, names) for c in calls):
        return Parsed(text)
    return Parsed(content, tuple(calls))


def _mistral(text: str) -> tuple[str, list[ToolCall] | None]:
    content = text[: text.index("[TOOL_CALLS]")].strip()
    if _MISTRAL_NEW.search(text):  # [TOOL_CALLS]name[ARGS]{...} ...
        calls: list[ToolCall] = []
        parts = _MISTRAL_NEW.split(text[text.index("[TOOL_CALLS]"):])
        for name, args in zip(parts[1::2], parts[2::2]):
            arguments = _json(args.strip())
            if not isinstance(arguments, dict):
                return content, None
            calls.append(ToolCall(name, json.dumps(arguments, ensure_ascii=False)))
        return content, calls
    body = _json(text[text.index("[TOOL_CALLS]") + len("[TOOL_CALLS]"):].strip())
    items = body if isinstance(body, list) else [body]
    return content, _calls(items)


def _generic(text: str) -> list[ToolCall] | None:
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    if not body.startswith(("{", "[")):
        return None
    value = _json(body)
    if isinstance(value, dict) and isinstance(value.get("tool_calls"), list):
        value = value["tool_calls"]
    return _calls(value if isinstance(value, list) else [value])


def _objects(bodies: list[str]) -> list[ToolCall] | None:
    return _calls([_json(b) for b in bodies])


def _calls(items: list[Any]) -> list[ToolCall] | None:
    out = []
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("function"), dict):
            item = item["function"]  # OpenAI's own shape, echoed
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            return None
        args = item.get("arguments", item.get("parameters", {}))
        if isinstance(args, str):
            args = _json(args)
        if not isinstance(args, dict):
            return None
        out.append(ToolCall(item["name"], json.dumps(args, ensure_ascii=False)))
    return out


def _valid(call: ToolCall, names: set[str] | None) -> bool:
    return bool(call.name) and (names is None or call.name in names)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


# ------------------------------------------------------------------ the grammar

# How each family wraps its calls: the marker before a call (or the list of calls), the
# text between marker and JSON and after it, and the key its call object gives the
# arguments. Families without a marker write the call object bare.
_SYNTAX: dict[str, tuple[str, str, str, str]] = {
    "hermes": ("<tool_call>", "\n", "\n", "</tool_call>"),
    "mistral": ("[TOOL_CALLS]", "", "", ""),
    "llama3": ("", "", "", ""),
    "generic": ("", "", "", ""),
}
_ARGUMENTS = {"llama3": "parameters"}


def marker(family: str) -> str:
    """The text that opens a family's calls in an answer ("" for a bare call object);
    Llama 3's ``<|python_tag|>`` is a control token, never in the text."""
    return {"hermes": "<tool_call>", "mistral": "[TOOL_CALLS]"}.get(family, "")


def offered(tools: tuple[Tool, ...], choice: str) -> tuple[Tool, ...]:
    """The tools a call may name under ``choice`` (a function's name: that one)."""
    if choice == "none":
        return ()
    return tools if choice in ("auto", "required") else tuple(t for t in tools if t.name == choice)


def grammar(tools: tuple[Tool, ...], choice: str, parallel: bool, family: str, literal: Callable[[str], str],
            answer: dict[str, Any] | None = None) -> str:
    """An llguidance Lark grammar for an answer that may (``auto``) or must (``required``,
    a function's name) call ``tools`` in ``family``'s syntax. Under ``auto`` the text is
    free until a call's marker (or a bare ``{`` or ``[`` opening the answer) appears, and
    from there the call object is held to the function's parameter schema; ``answer`` (a
    JSON schema) holds a text answer to it instead. ``literal`` turns a marker into a
    grammar item (a special token of the model's vocabulary, or a quoted string)."""
    from localspec.engine.constraint import JSON_OPTIONS, bound_numbers

    chosen = offered(tools, choice)
    key = _ARGUMENTS.get(family, "arguments")
    objects = [{"type": "object", "properties": {"name": {"const": t.name}, key: bound_numbers(t.parameters)},
                "required": ["name", key], "additionalProperties": False} for t in chosen]
    one = objects[0] if len(objects) == 1 else {"anyOf": objects}
    listed = {"type": "array", "items": one, "minItems": 1, **({} if parallel else {"maxItems": 1})}
    opts = {"x-guidance": JSON_OPTIONS}
    marker, before, after, close = _SYNTAX[family]
    lines = ["%llguidance {}"]
    if marker and family == "mistral":
        lines.append(f"calls: {literal(marker)} list_json")
    elif marker:
        block = " ".join(x for x in (literal(marker), json.dumps(before) if before else "", "call_json",
                                     json.dumps(after) if after else "", literal(close) if close else "") if x)
        lines.append(f"block: {block}")
        lines.append('calls: block ("\\n" block)*' if parallel else "calls: block")
    lines.append(f"call_json: %json {json.dumps({**one, **opts})}")
    lines.append(f"list_json: %json {json.dumps({**listed, **opts})}")
    bare = "call_json | list_json" if parallel else "call_json"
    calls = "calls" if marker else bare
    if choice != "auto":
        lines.insert(1, f"start: {calls}")
    elif answer is not None:
        lines.insert(1, f"start: answer | {calls}" + (f" | {bare}" if marker else ""))
        lines.append(f"answer: %json {json.dumps({**answer, **opts})}")
    else:
        lines.insert(1, f"start: TEXT? {'calls?' if marker else ''} | {bare}")
        text = r"/\s*[^\s{\[](?s:.*)/"
        for word in (marker, close):  # a marker written as plain text must end the text
            if word and not literal(word).startswith("<["):
                text += f" & ~/(?s:.*{re.escape(word)}.*)/"
        lines.append(f"TEXT: {text}")
    return "\n".join(lines) + "\n"
