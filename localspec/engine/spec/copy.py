"""Following a copy through the edits it makes.

An answer that writes its input out again with changes (a rename across a file, a type
added to every parameter) breaks its longest earlier match at every change: after a
renamed identifier the text's end no longer occurs in the input, and the suffix index
finds the copy again only once eight tokens match anew. This module keeps the copy
itself, a cursor into the text it copies. When a copy breaks, the tokens that follow are
aligned with the source just past the break; where the answer replaced a few source
tokens (the key) with a few of its own (the value) and went on copying, the edit is
learnt, and later proposals that reach the key write the value instead, so that the
next occurrence of a renamed name is drafted right and the copy goes on through it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from localspec.engine.spec.suffix import SuffixIndex
from localspec.engine.spec.tuning import TUNING



@dataclass
class Copy:
    """Where the answer is copying from: the next source position, any tokens of an
    edit still to come before it, and how many tokens in a row have followed the copy."""

    at: int
    length: int
    pending: tuple[int, ...] = ()


@dataclass
class CopyTracker:
    """The request's text (prompt and output) in a suffix index, the copy the answer is
    following in it (seated where the longest earlier match is long), and the edits
    learnt from where copies broke."""

    index: SuffixIndex
    min_length: int  # a match this long seats a copy
    prompt: int = 0  # the text's first tokens that are the input: a copy from there quotes it
    hint: int = 0  # the input's last tokens that are not the request's: the prompt's diffs applied (patch.py)
    copy: Copy | None = None
    edits: dict[int, list[tuple[tuple[int, ...], tuple[int, ...]]]] = field(default_factory=dict)  # key[0] -> edits
    broke: tuple[int, int] | None = None  # (source position, text position) of the last break
    # 1 for each of the answer's last recent_window tokens that no copy predicted (its own writing)
    recent: deque[int] = field(default_factory=lambda: deque(maxlen=TUNING.recent_window))
    n_originals: int = 0  # the sum of ``recent``, kept as tokens come

    def walk(self, copy: Copy, k: int) -> tuple[list[int], Copy]:
        """Up to ``k`` tokens the copy predicts (the source with the learnt edits
        applied), and the copy once they are written."""
        tokens, out = self.index.tokens, []
        at, pending = copy.at, copy.pending
        while len(out) < k:
            if pending:
                out.append(pending[0])
                pending = pending[1:]
                continue
            if at >= len(tokens):
                break
            for key, value in self.edits.get(tokens[at], ()):
                if tuple(tokens[at : at + len(key)]) == key:
                    at, pending = at + len(key), value
                    break
            else:
                out.append(tokens[at])
                at += 1
        return out, Copy(at, copy.length + len(out), pending)

    def propose(self, k: int) -> tuple[int, list[int], int]:
        """(the copy's length, up to ``k`` tokens it predicts, where in the text they are
        copied from); (0, [], -1) with no copy."""
        self._seat()
        copy = self.copy
        if copy is None:
            return 0, [], -1
        tokens, _ = self.walk(copy, k)
        return copy.length, tokens, copy.at

    def emitted(self, token: int) -> tuple[int, bool, bool] | None:
        """An output token: judged against what the copy (else the longest match)
        predicted, then indexed. Returns (the length behind the prediction, whether it
        held, whether it was copied from the prompt), or None where nothing predicted it."""
        self._seat()
        judged = None
        copy = self.copy
        if copy is not None:
            predicted, after = self.walk(copy, 1)
            kept = predicted[:1] == [token]
            if kept:
                self.copy = after
            else:
                self._break(copy, token)
            judged = (copy.length, kept, copy.at < self.prompt) if predicted else None
        else:
            n, start = self.index.match()
            if n and not self.index.branches():
                judged = (n, token == self.index.tokens[start], start < self.prompt)
        if len(self.recent) == TUNING.recent_window:
            self.n_originals -= self.recent[0]
        own = 0 if judged is not None and judged[1] and judged[0] >= TUNING.copied_min else 1
        self.recent.append(own)
        self.n_originals += own
        self.index.extend([token])
        if self.broke is not None and self.copy is None:
            self._resume()
        return judged

    def own_position(self, start: int) -> int:
        """Where the text's position ``start`` is in the request's own text (its prompt
        and output, without the hint); -1 inside the hint."""
        if start < self.prompt - self.hint:
            return start
        return start - self.hint if start >= self.prompt else -1

    def originals(self) -> int:
        """How many of the answer's last ``recent_window`` tokens no copy predicted: a
        short match right after the answer's own writing is more often a coincidence or a
        paraphrase than the start of a copy."""
        return self.n_originals

    def _seat(self) -> None:
        """A copy begins (or moves) where the longest earlier match is long and longer
        than the copy's own run."""
        n, start = self.index.match()
        if n >= self.min_length and (self.copy is None or n > self.copy.length) and not self.index.branches():
            self.copy = Copy(start, n)

    def _break(self, copy: Copy, token: int) -> None:
        """The answer left the copy. An edit that predicted the token it failed on, where
        the answer wrote the source's own token instead, is forgotten."""
        self.copy = None
        tokens = self.index.tokens
        if copy.pending:
            return
        for key, value in self.edits.get(tokens[copy.at], ()) if copy.at < len(tokens) else ():
            if tuple(tokens[copy.at : copy.at + len(key)]) == key and value[:1] != (token,) and token == key[0]:
                self.edits[key[0]].remove((key, value))
                return
        self.broke = (copy.at, len(tokens))

    def _resume(self) -> None:
        """After a break: if the answer's last ``copy_resync`` tokens are the source's
        just past the break (at most ``edit_key_max`` on), with at most ``edit_value_max``
        of its own before them, the copy resumes there, and the source tokens it skipped,
        replaced by the answer's, are an edit (constants: tuning.py)."""
        src, out = self.broke
        tokens = self.index.tokens
        end = len(tokens)
        if end - out > TUNING.edit_give_up:
            self.broke = None
            return
        tail = tokens[end - TUNING.copy_resync :]
        value = tuple(tokens[out : end - TUNING.copy_resync])
        if end - TUNING.copy_resync < out or len(value) > TUNING.edit_value_max:
            return
        skip = resync(tokens, src, tail, out)
        if skip is None:
            return
        key = tuple(tokens[src : src + skip])
        if key and key != value:
            edits = self.edits.setdefault(key[0], [])
            if (key, value) not in edits:
                edits.append((key, value))
        self.copy = Copy(src + skip + TUNING.copy_resync, TUNING.copy_resync)
        self.broke = None


def resync(source: list[int], at: int, tail: list[int], end: int | None = None) -> int | None:
    """How many source tokens from ``at`` (at most ``edit_key_max``) an edit skipped,
    where the source just past them is ``tail`` (the ``copy_resync`` tokens written since)
    and ends by ``end``; None where it is not there: the copy does not go on."""
    for skip in range(TUNING.edit_key_max + 1):
        stop = at + skip + TUNING.copy_resync
        if source[at + skip : stop] == tail and (end is None or stop <= end):
            return skip
    return None
