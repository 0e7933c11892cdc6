"""Constrained decoding: a request's JSON schema, grammar or regex as a token mask.

llguidance (the structured-output library behind llama.cpp, vLLM and SGLang) compiles the
constraint against the model's own vocabulary and keeps a matcher per request. The mask
is applied as a logits processor, so the target's distribution p, the draft model's q and
verification all see it: speculation stays lossless under a constraint (a draft the
grammar rejects has p = 0 and is never kept). EOS is allowed only where the grammar
accepts, and once the grammar is complete only EOS is.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from localspec.errors import InvalidRequest
from localspec.types import Constraint

GRAMMAR_CACHE = 64  # compiled grammars kept (a thousand distinct schemas stay bounded)
# JSON may be laid out freely, but whitespace between tokens is one space or one newline
# and up to 20 spaces or tabs (llama.cpp's json-schema-to-grammar rule): a model that drifts
# into whitespace (a random one does at once) would otherwise fill max_tokens with it.
JSON_OPTIONS = {"whitespace_flexible": True, "whitespace_pattern": r"(\x20|\x0A[\x20\x09]{0,20})?"}

# A number the model writes is bounded as llama.cpp's json-schema-to-grammar bounds it (16
# integer digits), and its fraction to 10 digits (llguidance's finest multipleOf): without
# a bound a sampled model can run "0.1234..." to max_tokens inside a valid number (SmolLM2
# at temperature 0.8 did, at seed 49 of 50). Only tightens: the output stays schema-valid.
NUMBER_LIMIT = 9_999_999_999_999_999
FRACTION_STEP = 1e-10
# llguidance's resource limits, named here so they are ours to see and change (its own
# defaults; ~14k lexer fuel is a millisecond): a grammar past them is refused in one sentence.
LIMITS = {
    "max_grammar_size": 500_000,  # grammar symbols after compiling
    "initial_lexer_fuel": 1_000_000,  # building the lexer (~20 ms)
    "step_lexer_fuel": 200_000,  # one mask (~14 ms at worst; typical masks take 0.1-0.5 ms)
    "step_max_items": 50_000,  # Earley items in one step
    "max_items_in_row": 2_000,
    "max_lexer_states": 250_000,
}
_DATA_KEYS = frozenset({"const", "enum", "default", "examples", "required"})
_DESCRIBE = {"json_schema": "JSON schema", "json_object": "JSON object", "gbnf": "GBNF grammar",
             "lark": "Lark grammar", "regex": "regex"}


def to_grammar(constraint: Constraint) -> str:
    """The constraint as an llguidance grammar (not yet checked against a vocabulary)."""
    from llguidance import LLMatcher
    from llguidance.gbnf_to_lark import any_to_lark

    kind, text = constraint.kind, constraint.text
    try:
        if kind == "json_object":
            return LLMatcher.grammar_from_json_schema(any_object(), defaults=JSON_OPTIONS)
        if kind == "json_schema":
            schema = json.loads(text)
            if not isinstance(schema, dict):
                raise ValueError("a JSON schema is a JSON object")
            return LLMatcher.grammar_from_json_schema(bound_numbers(schema), defaults=JSON_OPTIONS)
        if kind == "regex":
            return LLMatcher.grammar_from_regex(text)
        if kind == "lark":
            return LLMatcher.grammar_from_lark(text)
        if kind == "gbnf":
            return LLMatcher.grammar_from_lark(any_to_lark(text))
    except Exception as exc:  # the library's own words, in one sentence
        raise InvalidRequest(f"The {_DESCRIBE[kind]} is not valid: {_first_line(exc)}.") from None
    raise InvalidRequest(f"Unknown constraint kind {kind!r}.")


def bound_numbers(schema: Any) -> Any:
    """A copy of ``schema`` whose number and integer nodes carry the digit bounds above
    where they have none of their own (values under const, enum and the like are data,
    left alone)."""
    if isinstance(schema, list):
        return [bound_numbers(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: value if key in _DATA_KEYS else bound_numbers(value) for key, value in schema.items()}
    types = out.get("type")
    types = {types} if isinstance(types, str) else set(types) if isinstance(types, list) else set()
    if types & {"number", "integer"}:
        if "minimum" not in out and "exclusiveMinimum" not in out:
            out["minimum"] = -NUMBER_LIMIT
        if "maximum" not in out and "exclusiveMaximum" not in out:
            out["maximum"] = NUMBER_LIMIT
        if "number" in types and "multipleOf" not in out:
            out["multipleOf"] = FRACTION_STEP
    return out


def any_object() -> dict[str, Any]:
    """Any JSON object, its numbers bounded as in ``bound_numbers``."""
    value = {"anyOf": [{"type": "null"}, {"type": "boolean"}, {"type": "string"}, {"type": "number"},
                       {"type": "array", "items": {"$ref": "#/$defs/value"}},
                       {"type": "object", "additionalProperties": {"$ref": "#/$defs/value"}}]}
    return bound_numbers({"$defs": {"value": value}, "type": "object", "additionalProperties": {"$ref": "#/$defs/value"}})


def limits() -> Any:
    from llguidance import LLParserLimits

    return LLParserLimits(**LIMITS)


def _first_line(exc: Any) -> str:
    """The library's message on one line: its first line and its "error:" line, if any."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    detail = next((line for line in lines[1:] if line.startswith("error:")), "")
    return f"{lines[0]} {detail}".strip().rstrip(".:")


class Constraints:
    """Compiles and checks constraints for one model, caching the grammars (by their
    text, bounded) and the model's llguidance tokenizer (about a second to build)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self._grammars: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._lock = threading.Lock()

    def grammar(self, constraint: Constraint) -> str:
        """The compiled grammar, or InvalidRequest with the library's message (in the
        caller's thread: a bad schema never reaches the engine)."""
        from llguidance import LLMatcher

        key = (constraint.kind, constraint.text)
        with self._lock:
            if key in self._grammars:
                self._grammars.move_to_end(key)
                return self._grammars[key]
        tokenizer = self.model.guidance_tokenizer()
        grammar = to_grammar(constraint)
        error = LLMatcher.validate_grammar(grammar, tokenizer, limits=limits())
        if error:
            raise InvalidRequest(f"The {_DESCRIBE[constraint.kind]} is not valid: {_first_line(error)}.")
        with self._lock:
            self._grammars[key] = grammar
            while len(self._grammars) > GRAMMAR_CACHE:
                self._grammars.popitem(last=False)
        return grammar

    def literal(self, text: str) -> str:
        """``text`` as a Lark grammar item: the special token it is in this vocabulary
        (Qwen's ``<tool_call>``; llguidance matches special tokens only by id), else a string."""
        ids = self.model.tokenize(text, add_special=False, parse_special=True)
        if len(ids) == 1 and self.model.guidance_tokenizer().is_special_token(ids[0]):
            return f"<[{ids[0]}]>"
        return json.dumps(text)

    def processor(self, constraint: Constraint) -> ConstraintMask:
        from llguidance import LLMatcher

        matcher = LLMatcher(self.model.guidance_tokenizer(), self.grammar(constraint), log_level=0,
                             limits=limits())
        if matcher.is_error():
            raise InvalidRequest(f"The {_DESCRIBE[constraint.kind]} is not valid: {_first_line(matcher.get_error())}.")
        return ConstraintMask(matcher, self.model.n_vocab)


class ConstraintMask:
    """A logits processor: the matcher follows the tokens it is shown (the output so far,
    then drafts under verification; rolled back to what is shown next), and every token
    the grammar does not allow there gets -inf."""

    def __init__(self, matcher: Any, n_vocab: int) -> None:
        self.matcher = matcher
        self.n_vocab = n_vocab
        self.consumed: list[int] = []

    def __call__(self, tokens: list[int], logits: np.ndarray) -> np.ndarray:
        self._follow(tokens)
        bits = np.frombuffer(self.matcher.compute_bitmask(), dtype=np.uint8)
        allowed = np.unpackbits(bits, count=logits.shape[0], bitorder="little").view(bool)
        return np.where(allowed, logits, np.float32(-np.inf))

    def allows(self, tokens: list[int], token: int) -> bool:
        """Whether the grammar allows ``token`` after ``tokens`` (microseconds; no mask)."""
        self._follow(tokens)
        return self.matcher.validate_tokens([token]) == 1

    def allowed_prefix(self, before: list[int], tokens: list[int]) -> int:
        """How many of ``tokens`` the grammar allows after ``before`` (an n-gram proposal
        is cut there before its length is chosen)."""
        self._follow(before)
        return self.matcher.validate_tokens(tokens) if tokens else 0

    def _follow(self, tokens: list[int]) -> None:
        """Roll back to the common prefix with ``tokens`` and consume the rest. Only a
        prefix the grammar allowed is ever shown (a rejected draft is never verified
        past), so consuming never fails; if it would, the mask stays where it was."""
        have = self.consumed
        n = min(len(have), len(tokens))
        same = n if have[:n] == tokens[:n] else next(i for i in range(n) if have[i] != tokens[i])
        if same < len(have):
            self.matcher.rollback(len(have) - same)
            del have[same:]
        rest = tokens[same:]
        if rest:
            ok = self.matcher.validate_tokens(rest)
            if ok and self.matcher.consume_tokens(rest[:ok]):
                have.extend(rest[:ok])
