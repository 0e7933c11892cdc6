"""Chat messages -> prompt text, with the model's own template run in a sandbox.

A GGUF's ``tokenizer.chat_template`` is Jinja code from the internet, so it runs in
jinja2's ``ImmutableSandboxedEnvironment``: a template that reaches for ``__globals__``,
``os`` or ``popen`` fails with a ``TemplateError`` before anything runs. A template the
sandbox cannot render for other reasons falls back to llama.cpp's built-in templates (which
recognise the common formats). A model with no template gets llama.cpp's built-in template
for its architecture when there is one, else a plain format.

The sandbox limits what a template may touch, not how long it runs or how much it builds,
so each render also has a budget: a deadline checked before every ``{% for %}`` item, every
call and every output chunk (a loop that writes nothing still ends), and a cap on the
output and on any string or list that ``*``, ``+``, ``~``, a filter or a call builds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from localspec.errors import TemplateError
from localspec.types import Message, Tool

BuiltinRenderer = Callable[[str, list[tuple[str, str]]], "str | None"]


@dataclass(frozen=True)
class RenderedPrompt:
    text: str
    source: str  # "gguf" (the file's Jinja template), "builtin:<template>", or "plain"


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


# Real chat templates render in milliseconds; 2 s means one that loops (or is hostile).
RENDER_TIMEOUT_S = 2.0
# Even a million-token prompt is ~4 MiB of text; beyond that (plus twice what the messages
# bring, for templates that repeat them) the template is running away, not formatting.
MAX_OUTPUT_CHARS = 4 * 2**20
# The largest exponent ``**`` may take: 10**100000000 alone pins a core for seconds.
_MAX_EXPONENT = 4096
# Filters the parser wraps around loops and built values; a dotted name can't be written
# in a template, so only the rewrite in _BoundedSandbox._parse uses them.
_ITER_GUARD, _SIZE_GUARD = "localspec.iter_guard", "localspec.size_guard"


@dataclass(frozen=True)
class _Budget:
    deadline: float  # time.monotonic() value
    max_chars: int


_budget: ContextVar[_Budget] = ContextVar(
    "localspec_template_budget", default=_Budget(float("inf"), MAX_OUTPUT_CHARS)
)


def _check_time() -> None:
    if time.monotonic() > _budget.get().deadline:
        raise TemplateError(
            "The model's chat template did not finish rendering within "
            f"{RENDER_TIMEOUT_S:g} s; use --raw, or a model with a working template."
        )


def _too_long() -> TemplateError:
    return TemplateError(
        f"The model's chat template produced over {_budget.get().max_chars / 2**20:.0f} MiB "
        "of text; use --raw, or a model with a working template."
    )


def _check_size(value: Any) -> Any:
    if isinstance(value, (str, list, tuple)) and len(value) > _budget.get().max_chars:
        raise _too_long()
    return value


# pass_context on both guards also stops jinja from constant-folding them at compile time.
@jinja2.pass_context
def _iter_guard(_context: Context, iterable: Iterable[Any]) -> Iterator[Any]:
    for item in iterable:
        _check_time()
        yield item


@jinja2.pass_context
def _size_guard(_context: Context, value: Any) -> Any:
    return _check_size(value)


class _GuardRewriter(NodeTransformer):
    """Route every loop's iterable, ``~`` result and filter result through the guards."""

    def _wrap(self, node: nodes.Expr, guard: str) -> nodes.Filter:
        return nodes.Filter(node, guard, [], [], None, None, lineno=node.lineno)

    def visit_For(self, node: nodes.For) -> nodes.For:
        self.generic_visit(node)
        node.iter = self._wrap(node.iter, _ITER_GUARD)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Filter:
        return self._wrap(self.generic_visit(node), _SIZE_GUARD)

    def visit_Filter(self, node: nodes.Filter) -> nodes.Filter:
        node = self.generic_visit(node)
        return node if node.node is None else self._wrap(node, _SIZE_GUARD)


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, held to the render's _Budget (see the module docstring)."""

    intercepted_binops = frozenset({"*", "**", "+"})

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        return _GuardRewriter().visit(super()._parse(source, name, filename))

    def call(  # noqa: N805 - jinja's own name for self here, kept so kwargs can't clash
        __self, __context: Context, __obj: Any, *args: Any, **kwargs: Any
    ) -> Any:
        _check_time()
        return _check_size(super().call(__context, __obj, *args, **kwargs))

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":  # refuse before allocating: 'x' * 10**9 is a gigabyte at once
            seq, n = (right, left) if isinstance(left, int) else (left, right)
            if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
                if len(seq) * n > _budget.get().max_chars:
                    raise _too_long()
        elif operator == "**" and isinstance(right, int) and abs(right) > _MAX_EXPONENT:
            raise TemplateError(
                f"The model's chat template raises a number to the power {right}; "
                "use --raw, or a model with a working template."
            )
        return _check_size(super().call_binop(context, operator, left, right))


def _environment() -> ImmutableSandboxedEnvironment:
    env = _BoundedSandbox(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters[_ITER_GUARD] = _iter_guard
    env.filters[_SIZE_GUARD] = _size_guard
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.policies["json.dumps_kwargs"] = {"ensure_ascii": False}
    return env


_ENV = _environment()


def message_dict(message: Message) -> dict[str, Any]:
    """A message as chat templates read it (Hugging Face's convention: a tool call's
    arguments as an object, which templates pass through ``tojson``)."""
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.name, "arguments": _arguments(c.arguments)}}
                             for c in message.tool_calls]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        out["name"] = message.name
    return out


def tool_dict(tool: Tool) -> dict[str, Any]:
    return {"type": "function", "function": {"name": tool.name, "description": tool.description,
                                             "parameters": tool.parameters}}


def _arguments(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


def supports_tools(template: str | None) -> bool:
    """Whether a template renders the ``tools`` it is given (else they go in as text)."""
    return bool(template) and "tools" in template


def tools_as_text(messages: list[Message], tools: tuple[Tool, ...]) -> list[Message]:
    """For a template that knows no tools: the functions described in the system message,
    earlier calls and their results written out as text (the generic JSON form)."""
    described = "\n".join(json.dumps(tool_dict(t)["function"], ensure_ascii=False) for t in tools)
    guide = ("You may call these functions:\n" + described + "\nTo call one, answer with only a JSON object "
             '{"name": <function name>, "arguments": <an object of its parameters>}.') if tools else ""
    out: list[Message] = []
    for m in messages:
        if m.tool_calls:
            calls = [{"name": c.name, "arguments": _arguments(c.arguments)} for c in m.tool_calls]
            text = json.dumps(calls[0] if len(calls) == 1 else calls, ensure_ascii=False)
            out.append(Message("assistant", (m.content + "\n" if m.content else "") + text))
        elif m.role == "tool":
            out.append(Message("user", f"The function {m.name} returned: {m.content}" if m.name
                               else f"The function returned: {m.content}"))
        else:
            out.append(Message(m.role, m.content))
    if guide:
        if out and out[0].role == "system":
            out[0] = Message("system", out[0].content + "\n\n" + guide)
        else:
            out.insert(0, Message("system", guide))
    return out


def render_jinja(
    template: str, messages: list[Message], *, bos_token: str = "", eos_token: str = "",
    tools: tuple[Tool, ...] = (),
) -> str:
    """Render ``template`` in the sandbox. Raises TemplateError for an unsafe template
    (SecurityError) or a runaway one (past RENDER_TIMEOUT_S, over the size cap, recursing
    without end), and jinja2's own errors for one that is merely broken."""
    max_chars = MAX_OUTPUT_CHARS + 2 * sum(len(m.content) for m in messages)
    token = _budget.set(_Budget(time.monotonic() + RENDER_TIMEOUT_S, max_chars))
    extra = {"tools": [tool_dict(t) for t in tools]} if tools else {}
    try:
        chunks: list[str] = []
        size = 0
        for chunk in _ENV.from_string(template).generate(
            messages=[message_dict(m) for m in messages],
            add_generation_prompt=True,
            bos_token=bos_token,
            eos_token=eos_token,
            **extra,
        ):
            size += len(chunk)
            if size > max_chars:
                raise _too_long()
            _check_time()
            chunks.append(chunk)
        return "".join(chunks)
    except RecursionError as exc:
        raise TemplateError(
            "The model's chat template recursed without end; "
            "use --raw, or a model with a working template."
        ) from exc
    except SecurityError as exc:
        raise TemplateError(
            f"The model's chat template tried an unsafe operation ({exc}); "
            "refusing to run it (use --raw to skip the template)."
        ) from exc
    finally:
        _budget.reset(token)


def plain_format(messages: list[Message]) -> str:
    """A neutral format for models that ship no template."""
    parts = [f"{m.role.capitalize()}: {m.content}" for m in messages]
    return "\n\n".join(parts) + "\n\nAssistant:"


def render(
    messages: list[Message],
    template: str | None,
    *,
    bos_token: str = "",
    eos_token: str = "",
    builtin: BuiltinRenderer | None = None,
    builtin_name: str | None = None,
    tools: tuple[Tool, ...] = (),
) -> RenderedPrompt:
    """Render with the file's template; else llama.cpp's built-in ``builtin_name`` (the
    one for the model's architecture, when llama.cpp has one); else the plain format.
    ``tools`` go to a template that renders them, and into the text for one that does not."""
    if not supports_tools(template) and (tools or any(m.tool_calls or m.role == "tool" for m in messages)):
        messages, tools = tools_as_text(messages, tools), ()
    pairs = [(m.role, m.content) for m in messages]
    if template:
        try:
            return RenderedPrompt(
                render_jinja(template, messages, bos_token=bos_token, eos_token=eos_token, tools=tools),
                "gguf",
            )
        except TemplateError:
            raise
        except jinja2.exceptions.TemplateError as exc:
            text = builtin(template, pairs) if builtin else None
            if text is None:
                raise TemplateError(
                    f"The model's chat template failed to render ({exc}); "
                    "use --raw to send the prompt as it is."
                ) from exc
            return RenderedPrompt(text, "builtin:detected")
    if builtin and builtin_name:
        text = builtin(builtin_name, pairs)
        if text is not None:
            return RenderedPrompt(text, f"builtin:{builtin_name}")
    return RenderedPrompt(plain_format(messages), "plain")
