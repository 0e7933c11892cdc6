"""The benchmark's prompts: suites shipped as data, or the user's.

``builtin`` (prompts.jsonl): code generation, code edits that repeat their input, a chat
answer, a summary; ``agent`` (agent.jsonl): what coding agents send (edits, diffs, document
questions, a fix loop); ``specbench`` (specbench.jsonl): a fixed sample of the public
Spec-Bench question set (hemingkx/Spec-Bench, data/spec_bench/question.jsonl at commit
fd2c1cd, Apache-2.0, SPEC-BENCH-LICENSE): the first turns of questions 0, 20, 40 and 60
of each of its six categories, ids 81-541; ``edits`` (edits.jsonl): code edits whose
answers change one line in every few (type hints, docstrings, a rename, logging), written
for the bound on loss and shared with no other suite.
"""

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


SUITES = {"builtin": "prompts.jsonl", "agent": "agent.jsonl", "specbench": "specbench.jsonl", "edits": "edits.jsonl"}


def suite(name: str) -> list[BenchPrompt]:
    """One of the shipped suites (``SUITES``)."""
    if name not in SUITES:
        raise InvalidRequest(f"No suite {name!r}: choose from {', '.join(SUITES)}.")
    text = resources.files("localspec.bench").joinpath(SUITES[name]).read_text(encoding="utf-8")
    return _parse(text.splitlines(), f"the {name} suite")


def suites(names: str) -> list[BenchPrompt]:
    """Shipped suites by a comma-separated list of names, ``all`` for every one."""
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    if not wanted:
        raise InvalidRequest(f"Name a suite: {', '.join(SUITES)} or all.")
    if "all" in wanted:
        wanted = list(SUITES)
    return [p for name in dict.fromkeys(wanted) for p in suite(name)]


def builtin_suite() -> list[BenchPrompt]:
    """Code generation, code edits that repeat their input, a chat answer, a summary."""
    return suite("builtin")
