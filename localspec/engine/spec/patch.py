"""The text a diff in the prompt makes, as a source to copy from.

An answer asked to apply a unified diff to a file writes the file out again with each
hunk's ``+`` lines in place of its ``-`` lines. Copying from the file, its drafts fail at
every hunk (a draft of 63 broke where a hunk inserted lines); copying from the diff, they
fail at every line (a diff's lines start with a prefix the file's lines lack, and a
context line's leading space tokenizes with its indentation). So the prompt's diffs are
applied here, and the result is indexed with the prompt (``CopyTracker.hint``): the
answer's longest earlier match then runs through the hunks.

Hand-written diffs in prompts have wrong line numbers, missing headers and trailing
spaces stripped, and a patch tool rejects them; this is a draft source, not a patch
tool, so a hunk is placed by its old lines (context and ``-``) alone, found in order in
the text around the diff, and a hunk not found is left out.
"""

from __future__ import annotations

import bisect
import re
from typing import Protocol

from localspec.engine.spec.tuning import TUNING

HUNK = re.compile(r"@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")
HEADERS = ("--- ", "+++ ", "diff ", "index ")  # a diff's header lines, before and between its files' hunks


class Tokenizer(Protocol):
    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]: ...

    def token_to_piece(self, token: int, *, special: bool = False) -> bytes: ...


def diff_hints(tokenizer: Tokenizer, prompt: list[int]) -> list[int]:
    """The tokens of the prompt's text with each of its diffs applied (several diffs:
    one after another, each to the text its predecessor made); [] where the prompt has
    no diff that applies. Cheap on prompts without one: a scan for the hunk marker."""
    text = b"".join(tokenizer.token_to_piece(t) for t in prompt).decode("utf-8", "replace")
    if "@@ -" not in text:
        return []
    texts = patched(text)
    if not texts:
        return []
    tokens = tokenizer.tokenize("\n".join(texts), add_special=False, parse_special=False)
    return tokens if len(tokens) <= TUNING.hint_max_tokens else []


def patched(text: str) -> list[str]:
    """For each diff in ``text`` whose hunks apply to the lines around it: those lines
    with the hunks applied (the diffs themselves left out)."""
    lines = text.split("\n")
    diffs = list(_diffs(lines))
    if not diffs:
        return []
    inside = {i for first, end, _ in diffs for i in range(first, end)}
    source = [line for i, line in enumerate(lines) if i not in inside]
    finder = _Finder(source)
    out = []
    for _, _, hunks in diffs[:TUNING.max_diffs]:
        result = _apply(source, hunks, finder)
        if result is not None:
            out.append("\n".join(result))
    return out


Hunk = tuple[list[str], list[str]]  # (old lines: context and "-", new lines: context and "+")


def _diffs(lines: list[str]):
    """(first line, end line, hunks) of each diff: its headers and its hunks."""
    i = 0
    while i < len(lines):
        if not HUNK.match(lines[i]):
            i += 1
            continue
        first = i
        while first > 0 and lines[first - 1].startswith(HEADERS):
            first -= 1
        hunks: list[Hunk] = []
        while i < len(lines) and HUNK.match(lines[i]):
            old: list[str] = []
            new: list[str] = []
            i += 1
            while i < len(lines) and _in_hunk(lines, i):
                line = lines[i]
                kind, body = line[:1], line[1:]
                if kind in (" ", ""):  # a blank context line loses its space in many editors
                    old.append(body)
                    new.append(body)
                elif kind == "-":
                    old.append(body)
                elif kind == "+":
                    new.append(body)
                i += 1  # ("\ No newline at end of file" is neither)
            while old and new and old[-1] == new[-1] == "":  # blank lines after the hunk are not context
                old.pop()
                new.pop()
            hunks.append((old, new))
            while i < len(lines) and lines[i].startswith(HEADERS):
                i += 1  # the next file's headers: one diff for the prompt's files
        if any(old for old, _ in hunks):
            yield first, i, hunks


def _in_hunk(lines: list[str], i: int) -> bool:
    line = lines[i]
    if HUNK.match(line) or line.startswith(("diff ", "```")):
        return False
    if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
        return False  # the next file's headers
    if line == "":  # a blank context line, unless the diff ended there
        return i + 1 < len(lines) and lines[i + 1][:1] in (" ", "+", "-", "\\") and not lines[i + 1].startswith("```")
    return line[:1] in (" ", "+", "-", "\\")


def _apply(source: list[str], hunks: list[Hunk], finder: _Finder) -> list[str] | None:
    """``source`` with each hunk's old lines (found in order, trailing spaces ignored)
    replaced by its new ones; None when no hunk is found."""
    out: list[str] = []
    at = 0
    found = 0
    for old, new in hunks:
        if not old:
            continue
        where = finder.find([line.rstrip() for line in old], at)
        if where < 0:
            continue
        out.extend(source[at:where])
        out.extend(new)
        at = where + len(old)
        found += 1
    if not found:
        return None
    out.extend(source[at:])
    return out


class _Finder:
    """Where a run of lines first occurs from a position on: the candidates are the
    places of its first line (an index of the stripped lines), checked within the
    prompt's budget of comparisons (``hint_max_compared``, tuning.py)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = [line.rstrip() for line in lines]
        self.at: dict[str, list[int]] = {}
        for i, line in enumerate(self.lines):
            self.at.setdefault(line, []).append(i)
        self.left = TUNING.hint_max_compared

    def find(self, key: list[str], start: int) -> int:
        places = self.at.get(key[0], [])
        lines, n = self.lines, len(key)
        for i in places[bisect.bisect_left(places, start) :]:
            if self.left <= 0:
                return -1
            self.left -= n
            if lines[i : i + n] == key:
                return i
        return -1
