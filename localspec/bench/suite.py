"""The benchmark's prompts: a suite shipped as data (``prompts.jsonl``), or the user's."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from localspec.errors import InvalidRequest


@dataclass(frozen=True)
class BenchPrompt:
    name: str
    kind: str  # code-generation, code-editing, code-rewrite, chat, summarisation, or the user's
    prompt: str


def _parse(lines: list[str], where: str) -> list[BenchPrompt]:
    prompts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            text = obj["prompt"]
            if not isinstance(text, str) or not text.strip():
                raise ValueError
        except (ValueError, KeyError, TypeError):
            raise InvalidRequest(
                f'{where}, line {number}: expected a JSON object with a non-empty "prompt".'
            ) from None
        prompts.append(
            BenchPrompt(str(obj.get("name", f"prompt-{number}")), str(obj.get("kind", "user")), text)
        )
    if not prompts:
        raise InvalidRequest(f"{where} holds no prompts.")
    return prompts


def load_prompts(path: Path) -> list[BenchPrompt]:
    """JSON Lines: {"prompt": ..., "name": optional, "kind": optional} per line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InvalidRequest(f"Cannot read the prompts file {path}: {exc.strerror}.") from exc
    except UnicodeDecodeError:
        raise InvalidRequest(f"The prompts file {path} is not UTF-8 text.") from None
    return _parse(lines, str(path))


def builtin_suite() -> list[BenchPrompt]:
    """Code generation, code edits that repeat their input, a chat answer, a summary."""
    text = resources.files("localspec.bench").joinpath("prompts.jsonl").read_text(encoding="utf-8")
    return _parse(text.splitlines(), "the built-in suite")
