"""Offline batch inference: JSON Lines in, one result line per input line out, in input
order, resumable.

The engine runs the lines through all its slots (continuous batching); results are
written in input order as soon as each is final, one whole line at a time, so a file cut
short by Ctrl-C or a crash holds only whole lines and a re-run skips the ids it has. A
bad line (not JSON, no prompt, a bad value, a prompt longer than the context) becomes an
output line with ``error`` and the batch goes on.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from localspec.errors import LocalspecError
from localspec.outputs.records import result_record
from localspec.types import Constraint, Message, Request, Result, SpecConfig

# Lines submitted ahead of the one being written, per slot: enough to keep every slot busy
# while the head of the queue finishes, few enough that a huge file is not all tokenized.
AHEAD_PER_SLOT = 2
_OVERRIDES = {"max_tokens", "temperature", "seed", "stop", "json_schema", "speculative"}
_KNOWN = {"id", "prompt", "messages"} | _OVERRIDES


@dataclass(frozen=True)
class Line:
    """One input line: its id, and the request it asks for or why it cannot run."""

    number: int  # 1-based, in the input
    id: Any
    request: Request | None
    error: str | None = None


def parse_line(text: str, number: int, base: Request) -> Line:
    """An input line as a request on top of ``base`` (the command's settings)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return Line(number, number, None, f"Line {number} is not JSON ({exc.msg}).")
    if not isinstance(data, dict):
        return Line(number, number, None, f"Line {number} is not a JSON object.")
    ident = data.get("id", number)
    try:
        return Line(number, ident, _request(data, base))
    except (LocalspecError, TypeError, ValueError) as exc:
        message = exc.message if isinstance(exc, LocalspecError) else str(exc)
        return Line(number, ident, None, f"Line {number}: {message.rstrip('.')}.")


def _request(data: dict[str, Any], base: Request) -> Request:
    unknown = sorted(set(data) - _KNOWN)
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r}")
    prompt, messages = data.get("prompt"), data.get("messages")
    if (prompt is None) == (messages is None):
        raise ValueError("give a \"prompt\" or \"messages\" (one of them)")
    request = replace(base, prompt=None, messages=None)
    if prompt is not None:
        if not isinstance(prompt, str):
            raise ValueError("\"prompt\" must be a string")
        request = replace(request, messages=[Message("user", prompt)]) if base.messages is not None else replace(
            request, prompt=prompt)
    else:
        if not isinstance(messages, list) or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages):
            raise ValueError("\"messages\" must be a list of {\"role\", \"content\"} objects")
        request = replace(request, messages=[Message(m["role"], m["content"]) for m in messages])
    if base.messages:  # the command's system prompt, where the line brings none
        own = request.messages or []
        if own and not any(m.role == "system" for m in own):
            request = replace(request, messages=list(base.messages) + own)
    sampling = request.sampling
    if "temperature" in data:
        sampling = replace(sampling, temperature=_number(data["temperature"], "temperature"))
    if "seed" in data:
        if data["seed"] is not None and (not isinstance(data["seed"], int) or isinstance(data["seed"], bool)):
            raise ValueError("\"seed\" must be an integer")
        sampling = replace(sampling, seed=data["seed"])
    request = replace(request, sampling=sampling)
    if "max_tokens" in data:
        value = data["max_tokens"]
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ValueError("\"max_tokens\" must be a positive integer")
        request = replace(request, max_tokens=value)
    if "stop" in data:
        stop = data["stop"]
        stop = [stop] if isinstance(stop, str) else stop
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise ValueError("\"stop\" must be a string or a list of strings")
        request = replace(request, stop=stop)
    if "json_schema" in data:
        if not isinstance(data["json_schema"], dict):
            raise ValueError("\"json_schema\" must be a JSON schema object")
        request = replace(request, constraint=Constraint("json_schema", json.dumps(data["json_schema"])))
    if "speculative" in data:
        spec = data["speculative"]
        if not isinstance(spec, dict):
            raise ValueError("\"speculative\" must be an object such as {\"mode\": \"ngram\"}")
        unknown = sorted(set(spec) - {f.name for f in fields(SpecConfig)})
        if unknown:
            raise ValueError(f"unknown \"speculative\" field {unknown[0]!r}")
        base_spec = request.spec if isinstance(request.spec, SpecConfig) else SpecConfig()
        request = replace(request, spec=replace(base_spec, **spec))
    return request


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"\"{name}\" must be a number")
    return float(value)


def record(line: Line, result: Result | None) -> dict[str, Any]:
    """The output line for an input line: ``run --json``'s record without the model and
    timings, under the line's id."""
    if result is None:
        return {"id": line.id, "error": line.error}
    full = result_record(result, model="", load_s=0.0)
    return {"id": line.id, **{k: full[k] for k in ("text", "finish_reason", "usage", "spec_stats", "error") if k in full}}


def done_ids(path: Path) -> set[str]:
    """The ids an earlier run wrote to ``path`` (as JSON text, so 1 and "1" differ); a
    last line cut short is removed from the file."""
    if not path.exists():
        return set()
    data = path.read_bytes()
    whole = data[: data.rfind(b"\n") + 1]
    if len(whole) != len(data):
        with path.open("r+b") as f:
            f.truncate(len(whole))
    ids = set()
    for raw in whole.splitlines():
        try:
            ids.add(json.dumps(json.loads(raw)["id"]))
        except (ValueError, KeyError, TypeError):
            continue
    return ids


def run(engine: Any, lines: Iterable[Line], write: Callable[[dict[str, Any]], None], *,
        on_done: Callable[[Line, Result | None], None] = lambda _line, _result: None) -> int:
    """Run every line on ``engine`` and ``write`` each output record in input order;
    returns how many lines failed. A KeyboardInterrupt cancels what is under way (what
    was written stays written)."""
    ahead = AHEAD_PER_SLOT * max(1, len(engine.slot_states()))
    pending: deque[tuple[Line, Any]] = deque()
    failed = 0
    source: Iterator[Line] = iter(lines)
    exhausted = False
    try:
        while pending or not exhausted:
            while not exhausted and len(pending) < ahead:
                line = next(source, None)
                if line is None:
                    exhausted = True
                    break
                pending.append((line, _submit(engine, line)))
            if not pending:
                break
            line, stream = pending[0]
            result = stream.wait() if not isinstance(stream, str) else None
            pending.popleft()
            if isinstance(stream, str):
                line = replace(line, error=stream)
            failed += result is None or result.error is not None
            write(record(line, result))
            on_done(line, result)
    finally:
        for _line, stream in pending:
            if not isinstance(stream, str):
                stream.cancel()
    return failed


def _submit(engine: Any, line: Line) -> Any:
    """The line's stream, or the sentence saying why it cannot run."""
    if line.request is None:
        return line.error or "Line has no request."
    try:
        return engine.submit(line.request)
    except LocalspecError as exc:
        return f"Line {line.number}: {exc.message}"
