"""A request as the engine takes it: every field range-checked, the prompt rendered (chat
template) and tokenized, all in the caller's thread, so that bad input is one sentence
to the caller and never a failure on the engine thread."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from typing import Any

from localspec.engine import templates
from localspec.errors import InvalidRequest, PromptTooLong
from localspec.types import MAX_CONSTRAINT_CHARS, TOOL_CHOICES, Constraint, Request, SpecConfig, Tool


def prompt_tokens(model: Any, request: Request, n_ctx: int) -> tuple[list[int], str | None]:
    """The prompt's tokens, and the chat template that rendered it (None: raw)."""
    template = None
    if request.messages is not None:
        rendered = templates.render(
            request.messages,
            model.chat_template,
            bos_token=model.vocab.bos_text,
            eos_token=model.vocab.eos_text,
            builtin=model.apply_builtin_template,
            builtin_name=model.builtin_template_name,
            tools=request.tools if request.tool_choice != "none" else (),
        )
        text, template = rendered.text, rendered.source
        bos = model.vocab.bos_text
        add_special = not (bos and text.startswith(bos))
    elif request.prompt_tokens is not None:
        text = None
    else:
        text, add_special = request.prompt or "", True
    if text is None:
        tokens = list(request.prompt_tokens or [])
        if any(not 0 <= t < model.n_vocab for t in tokens):
            raise InvalidRequest(f"Prompt token ids must be in [0, {model.n_vocab}).")
    else:
        tokens = model.tokenize(text, add_special=add_special, parse_special=True)
    if not tokens:
        raise InvalidRequest("The prompt is empty.")
    if len(tokens) >= n_ctx:
        raise PromptTooLong(
            f"The prompt is {len(tokens)} tokens but the context holds {n_ctx}; "
            f"shorten it or raise --ctx-size (this model supports up to "
            f"{model.n_ctx_train})."
        )
    return tokens, template


def spec_for(request: Request, default: SpecConfig, has_draft: bool) -> SpecConfig:
    """The speculation a request runs with: its own, the engine's with its mode, or the
    engine's."""
    if request.spec is None:
        spec = default
    elif isinstance(request.spec, SpecConfig):
        spec = request.spec
    elif isinstance(request.spec, str):
        spec = replace(default, mode=request.spec)
    else:
        raise InvalidRequest("spec must be a SpecConfig or a mode name.")
    if spec.mode == "draft" and not has_draft:
        raise InvalidRequest("Speculation mode 'draft' needs a draft model (--draft MODEL).")
    return spec


def opens_thinking(model: Any, tokens: list[int]) -> bool:
    """Whether the rendered prompt ends inside a ``<think>`` block (DeepSeek-R1's template
    opens one for the answer)."""
    tail = b"".join(model.token_to_piece(t, special=True) for t in tokens[-12:])
    return tail.decode("utf-8", "replace").rstrip().endswith("<think>")


def check(request: Request, n_vocab: int) -> None:
    """Range-check every field up front, in the caller's thread: a bad value is one
    sentence to the caller, never a failure on the engine thread."""
    if request.prompt is None and request.messages is None and request.prompt_tokens is None:
        raise InvalidRequest("A request needs a prompt, messages or prompt tokens.")
    if request.prompt is not None and not request.prompt.strip():
        raise InvalidRequest("The prompt is empty.")
    if request.messages is not None and not any(m.content.strip() or m.tool_calls for m in request.messages):
        raise InvalidRequest("The prompt is empty.")
    check_tools(request)
    s = request.sampling
    for name in ("temperature", "top_p", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty"):
        value = getattr(s, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InvalidRequest(f"{name} must be a number, not {value!r}.")
    for name in ("top_k", "penalty_last_n"):
        value = getattr(s, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidRequest(f"{name} must be an integer, not {value!r}.")
    if not 0.0 < s.top_p <= 1.0:
        raise InvalidRequest(f"top_p must be in (0, 1], not {s.top_p}.")
    if not 0.0 <= s.min_p <= 1.0:
        raise InvalidRequest(f"min_p must be in [0, 1], not {s.min_p}.")
    if s.repeat_penalty <= 0.0:
        raise InvalidRequest(f"repeat_penalty must be positive, not {s.repeat_penalty}.")
    if s.temperature < 0.0:
        raise InvalidRequest(f"temperature must be 0 or more, not {s.temperature}.")
    if s.penalty_last_n < 0:
        raise InvalidRequest(f"penalty_last_n must be 0 or more, not {s.penalty_last_n}.")
    if s.seed is not None and (isinstance(s.seed, bool) or not isinstance(s.seed, int)):
        raise InvalidRequest(f"seed must be an integer, not {s.seed!r}.")
    for token, bias in (s.logit_bias or {}).items():
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < n_vocab:
            raise InvalidRequest(f"logit_bias token ids must be in [0, {n_vocab}), not {token!r}.")
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not -100.0 <= bias <= 100.0:
            raise InvalidRequest(f"logit_bias values must be from -100 to 100, not {bias!r} (token {token}).")
    if request.max_tokens is not None and (isinstance(request.max_tokens, bool) or not isinstance(request.max_tokens, int)
                                           or request.max_tokens < 1):
        raise InvalidRequest(f"max_tokens must be at least 1, not {request.max_tokens}.")
    if isinstance(request.top_logprobs, bool) or not isinstance(request.top_logprobs, int) \
            or not 0 <= request.top_logprobs <= 20:
        raise InvalidRequest(f"top_logprobs must be from 0 to 20, not {request.top_logprobs!r}.")
    if not isinstance(request.store_key, str):
        raise InvalidRequest(f"store_key must be a string, not {request.store_key!r}.")
    if not all(isinstance(x, str) for x in request.stop):
        raise InvalidRequest("stop must be a list of strings.")
    if request.beams is not None:
        if isinstance(request.beams, bool) or not isinstance(request.beams, int) or request.beams < 1:
            raise InvalidRequest(f"beams must be at least 1, not {request.beams!r}.")
        if request.constraint is not None or request.stop:
            raise InvalidRequest("Beam search takes no constraint and no stop strings.")
        if not isinstance(request.length_penalty, (int, float)) or isinstance(request.length_penalty, bool) \
                or not math.isfinite(request.length_penalty):
            raise InvalidRequest(f"length_penalty must be a number, not {request.length_penalty!r}.")


TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")  # OpenAI's rule for function names
MAX_TOOLS = 128
MAX_SCHEMA_DEPTH = 64  # real parameter schemas nest a few levels; recursion limits sit near 1000


def _depth(value: Any) -> int:
    """How deeply JSON data nests (without recursing, so any depth is safe to measure)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            todo += [(v, depth + 1) for v in item.values()]
        elif isinstance(item, list):
            todo += [(v, depth + 1) for v in item]
    return deepest


def check_tools(request: Request) -> None:
    tools, choice = request.tools, request.tool_choice
    if not isinstance(tools, tuple) or not all(isinstance(t, Tool) for t in tools):
        raise InvalidRequest("tools must be a tuple of Tool.")
    if len(tools) > MAX_TOOLS:
        raise InvalidRequest(f"At most {MAX_TOOLS} tools are accepted, not {len(tools)}.")
    names = [t.name for t in tools]
    for tool in tools:
        if not isinstance(tool.name, str) or not TOOL_NAME.match(tool.name):
            raise InvalidRequest(f"A tool's name must be 1 to 64 letters, digits, '_', '.' or '-', not {tool.name!r}.")
        if not isinstance(tool.parameters, dict) or tool.parameters.get("type", "object") != "object":
            raise InvalidRequest(f"The parameters of tool {tool.name!r} must be a JSON schema of an object.")
        if _depth(tool.parameters) > MAX_SCHEMA_DEPTH:
            raise InvalidRequest(f"The parameters of tool {tool.name!r} nest deeper than {MAX_SCHEMA_DEPTH} levels.")
    if len(set(names)) != len(names):
        raise InvalidRequest("Two tools have the same name.")
    if not isinstance(choice, str) or (choice not in TOOL_CHOICES and choice not in names):
        offered = ", ".join(repr(n) for n in names) or "none given"
        raise InvalidRequest(f"tool_choice must be auto, none, required or the name of a tool ({offered}), "
                             f"not {choice!r}.")
    if choice != "auto" and choice != "none" and not tools:
        raise InvalidRequest(f"tool_choice {choice!r} needs tools.")
    if tools and choice != "none" and request.constraint is not None \
            and request.constraint.kind not in ("json_schema", "json_object"):
        raise InvalidRequest("Tools combine with a JSON schema answer, not with a grammar or regex.")


def tool_family(template: str | None) -> str:
    from localspec import toolcalls

    return toolcalls.family(template) if templates.supports_tools(template) else "generic"


def constraint(request: Request, family: str, literal: Any) -> Constraint | None:
    """What the output must match: the request's own constraint, or, when it offers tools,
    the grammar of its calls (which holds a text answer to the request's JSON schema)."""
    from localspec import toolcalls
    from localspec.engine.constraint import any_object

    check_tools(request)
    if not request.tools or request.tool_choice == "none":
        return request.constraint
    answer = None
    if request.constraint is not None:
        try:
            answer = json.loads(request.constraint.text) if request.constraint.kind == "json_schema" else any_object()
        except ValueError:
            raise InvalidRequest("The JSON schema is not valid JSON.") from None
    grammar = toolcalls.grammar(request.tools, request.tool_choice, request.parallel_tool_calls, family, literal, answer)
    if len(grammar) > MAX_CONSTRAINT_CHARS:
        raise InvalidRequest(f"The tools are too large to constrain: their grammar is {len(grammar):,} characters; "
                             f"at most {MAX_CONSTRAINT_CHARS:,} are accepted.")
    return Constraint("lark", grammar)
