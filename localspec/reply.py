"""An answer split as it arrives: the model's reasoning, its text, and its tool calls.

Streaming and non-streaming front ends run the same parser (a whole answer is one
``feed``), so both give the same split. Text that might still turn out to be a tool
call's opening, or the start of ``<think>``, is held back until it is told apart; a
call's arguments are passed on as they are written once its name is known.

A call that repeats an earlier one (same function, same arguments) ends the answer
(``repeated``): small models, given the chance of parallel calls, otherwise repeat their
calls until max_tokens.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from localspec import toolcalls
from localspec.types import ToolCall

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
# What may open a bare call at the very start of an answer (a JSON object or list, or a
# fenced JSON block): held back until the answer shows whether it is one.
_OPENERS = ("{", "[", "```json", "```\n{")
_HEAD = re.compile(r'\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*')


@dataclass(frozen=True)
class Delta:
    kind: str  # "reasoning", "content" or "call"
    text: str = ""  # reasoning or content text; a call's next piece of arguments
    index: int = 0  # a call's place among the answer's calls
    name: str | None = None  # a call's name, on its first delta


@dataclass(frozen=True)
class Reply:
    content: str
    reasoning: str = ""
    calls: tuple[ToolCall, ...] = ()
    repeated: bool = False  # ended at a call that repeated an earlier one


def thinks(template: str | None) -> bool:
    """Whether a chat template's model thinks in ``<think>`` blocks (DeepSeek-R1 distills,
    Qwen3, QwQ)."""
    return bool(template) and THINK_OPEN in template


def _partial_suffix(text: str, word: str) -> int:
    """The length of the longest end of ``text`` that begins ``word``."""
    for n in range(min(len(word) - 1, len(text)), 0, -1):
        if word.startswith(text[-n:]):
            return n
    return 0


class ReplyParser:
    """``feed`` the answer's text as it comes for its deltas; ``close`` at the end for the
    rest, then ``reply``. ``family`` None: no tool calls (the request offered none);
    ``think``: split off ``<think>`` blocks; ``thinking``: the prompt opened one."""

    def __init__(self, *, family: str | None = None, names: set[str] | None = None, think: bool = False,
                 thinking: bool = False) -> None:
        self.family, self.names = family, names
        self.think, self.thinking = think, thinking
        self._started = False  # past the answer's opening (where <think> may appear)
        self._pending = ""  # text not yet passed on by the reasoning split
        self._reasoning: list[str] = []
        self._calls = _Calls(family, names) if family else None
        self._content: list[str] = []
        self.reply: Reply | None = None

    @property
    def repeated(self) -> bool:
        return self._calls is not None and self._calls.repeated

    def feed(self, text: str) -> list[Delta]:
        return self._route(self._split(text, final=False))

    def close(self) -> list[Delta]:
        out = self._route(self._split("", final=True))
        if self._calls is None:
            calls: tuple[ToolCall, ...] = ()
        else:
            tail, calls = self._calls.close()
            out += self._route_content(tail)
        self.reply = Reply("".join(self._content).strip(), "".join(self._reasoning).strip(), calls, self.repeated)
        return out

    # ------------------------------------------------------------ <think> ... </think>

    def _split(self, text: str, final: bool) -> list[Delta]:
        """Reasoning deltas, and content (not yet routed to the call parser)."""
        self._pending += text
        out: list[Delta] = []
        if not self.think:
            out.append(Delta("content", self._pending))
            self._pending = ""
            return out
        if not self._started and not self.thinking:
            opening = self._pending.lstrip()
            if opening.startswith(THINK_OPEN):
                self.thinking, self._started = True, True
                self._pending = opening[len(THINK_OPEN):]
            elif THINK_OPEN.startswith(opening) and not final:
                return out  # may still be "<think>"
            else:
                self._started = True
        if self.thinking:
            end = self._pending.find(THINK_CLOSE)
            if end >= 0:
                out.append(Delta("reasoning", self._pending[:end]))
                self._pending = self._pending[end + len(THINK_CLOSE):].lstrip()
                self.thinking, self._started = False, True
            else:
                keep = 0 if final else _partial_suffix(self._pending, THINK_CLOSE)
                out.append(Delta("reasoning", self._pending[: len(self._pending) - keep]))
                self._pending = self._pending[len(self._pending) - keep:]
                return [d for d in out if d.text]
        out.append(Delta("content", self._pending))
        self._pending = ""
        return [d for d in out if d.text]

    def _route(self, deltas: list[Delta]) -> list[Delta]:
        out: list[Delta] = []
        for d in deltas:
            if d.kind == "reasoning":
                self._reasoning.append(d.text)
                out.append(d)
            elif self._calls is None:
                out += self._route_content([d])
            else:
                out += self._route_content(self._calls.feed(d.text))
        return out

    def _route_content(self, deltas: list[Delta]) -> list[Delta]:
        for d in deltas:
            if d.kind == "content":
                self._content.append(d.text)
        return [d for d in deltas if d.text or d.name]


@dataclass
class _Call:
    name: str
    start: int  # where its arguments begin in the buffer
    sent: int  # up to where they have been passed on
    arguments: str | None = None  # once complete
    held: list[Delta] = field(default_factory=list)  # not yet passed on: it may repeat an earlier call


@dataclass
class _Calls:
    """Tool calls out of the content, as it streams."""

    family: str
    names: set[str] | None
    buf: str = ""
    sent: int = 0  # content passed on: buf[:sent]
    start: int | None = None  # where the calls begin
    scan: int = 0
    calls: list[_Call] = field(default_factory=list)
    repeated: bool = False

    def feed(self, text: str) -> list[Delta]:
        if self.repeated:
            return []
        self.buf += text
        out: list[Delta] = []
        if self.start is None:
            self.start, safe = self._find()
            upto = self.start if self.start is not None else safe
            if upto > self.sent:
                out.append(Delta("content", self.buf[self.sent:upto]))
                self.sent = upto
            self.scan = self.start or 0
        if self.start is not None:
            out += self._stream_calls()
        return out

    def close(self) -> tuple[list[Delta], tuple[ToolCall, ...]]:
        """The deltas still owed, and the answer's calls (repeats dropped)."""
        out: list[Delta] = []
        parsed = toolcalls.parse(self.buf[self.start or 0:], self.family, self.names)
        calls = [toolcalls.ToolCall(c.name, c.arguments) for c in self.calls if c.arguments is not None]
        if self.repeated:
            pass
        elif parsed.calls and [c.name for c in parsed.calls[:len(calls)]] == [c.name for c in calls]:
            for i, call in enumerate(parsed.calls[len(calls):], start=len(calls)):
                if i < len(self.calls):  # begun but not seen to end: what is left of it
                    out += self._release(i) + [Delta("call", call.arguments[self.calls[i].sent - self.calls[i].start:],
                                                     index=i)]
                else:
                    out += [Delta("call", "", index=i, name=call.name), Delta("call", call.arguments, index=i)]
                calls.append(call)
            if parsed.content and self.start is not None:
                out.append(Delta("content", parsed.content))  # Hermes: text after the calls
        else:  # no call, or calls begun that did not parse: the rest comes back as text
            out.append(Delta("content", self.buf[self.sent:]))
        unique = list(dict.fromkeys((c.name, _canonical(c.arguments)) for c in calls))
        return out, tuple(toolcalls.ToolCall(name, args) for name, args in unique)

    def _find(self) -> tuple[int | None, int]:
        """Where the calls begin (None: not yet seen), and how much content is safe to pass
        on (text that may still begin a call's marker is held)."""
        marker = toolcalls.marker(self.family)
        if self.sent == 0:
            opening = self.buf.lstrip()
            lead = len(self.buf) - len(opening)
            if opening.startswith(_OPENERS):
                return lead, lead
            if any(o.startswith(opening) for o in _OPENERS + ((marker,) if marker else ())):
                return None, 0
        if marker:  # the text passed on so far holds no marker: search only what is held
            at = self.buf.find(marker, self.sent)
            if at >= 0:
                return at, at
            return None, len(self.buf) - _partial_suffix(self.buf, marker)
        return None, len(self.buf)

    def _stream_calls(self) -> list[Delta]:
        out: list[Delta] = []
        while True:
            call = self.calls[-1] if self.calls and self.calls[-1].arguments is None else None
            if call is None:
                head = _HEAD.search(self.buf, self.scan)
                if head is None:
                    return out
                name = _string(head.group(1))
                if name is None or (self.names is not None and name not in self.names):
                    return out  # not a call after all: close() decides
                call = _Call(name, head.end(), head.end(), held=[Delta("call", "", index=len(self.calls), name=name)])
                self.calls.append(call)
            index = len(self.calls) - 1
            while call.sent == call.start < len(self.buf) and self.buf[call.start].isspace():
                call.start = call.sent = call.start + 1
            end = _value_end(self.buf, call.start)
            upto = end if end is not None else len(self.buf)
            if upto > call.sent:
                call.held.append(Delta("call", self.buf[call.sent:upto], index=index))
                call.sent = upto
            text = self.buf[call.start:upto]
            if end is not None and any(c.name == call.name and _canonical(c.arguments) == _canonical(text)
                                       for c in self.calls[:-1]):
                self.repeated = True  # never shown
                self.calls.pop()
                return out
            if not any(c.name == call.name and _squeeze(c.arguments).startswith(_squeeze(text)) for c in self.calls[:-1]):
                out += self._release(index)  # not (or no longer) a repeat in the making
            if end is None:
                return out
            call.arguments = text.strip()
            out += self._release(index)
            self.scan = end

    def _release(self, index: int) -> list[Delta]:
        held, self.calls[index].held = self.calls[index].held, []
        return held


def _string(body: str) -> str | None:
    try:
        return json.loads(f'"{body}"')
    except ValueError:
        return None


def _squeeze(text: str | None) -> str:
    return re.sub(r"\s+", "", text or "")


def _canonical(arguments: str | None) -> str:
    """Arguments in one spelling (a JSON string holding an object is that object)."""
    try:
        value = json.loads(arguments or "")
        if isinstance(value, str):
            value = json.loads(value)
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    except (ValueError, RecursionError):
        return arguments or ""


def _value_end(text: str, i: int) -> int | None:
    """Where the JSON value starting at ``text[i:]`` (after whitespace) ends, or None while
    it is incomplete."""
    n = len(text)
    while i < n and text[i] in " \t\r\n":
        i += 1
    if i >= n:
        return None
    depth, in_string, escaped = 0, False, False
    for j in range(i, n):
        ch = text[j]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
                if depth == 0:
                    return j + 1
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return j + 1
        elif depth == 0 and ch in ",}\n":
            return j
    return None
