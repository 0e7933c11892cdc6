"""Prompt lookup: the n-gram index that proposes what followed an earlier occurrence."""

from __future__ import annotations

import bisect


class NgramIndex:
    """Prompt lookup: propose what followed an earlier occurrence of the last n tokens
    (n from n_max down to n_min). O(1) per token; a lookup is a dict hit and a bisect.

    Of several occurrences it takes the first after the ``cursor``, the place just past
    the text the last accepted draft was copied from, else the latest: an edited copy
    resumes where it left the source, and a common token ("(", " self") is otherwise
    found everywhere."""

    def __init__(self, tokens: list[int], n_min: int, n_max: int) -> None:
        self.n_min, self.n_max = n_min, n_max
        self.tokens: list[int] = []
        self.cursor = -1
        self._tables: dict[int, dict[tuple[int, ...], list[int]]] = {
            n: {} for n in range(n_min, n_max + 1)
        }
        self.extend(tokens)

    def extend(self, tokens: list[int]) -> None:
        toks = self.tokens
        for t in tokens:
            end = len(toks)  # the n-grams ending here are followed by t
            for n, table in self._tables.items():
                if end >= n:
                    key = tuple(toks[end - n : end])
                    starts = table.get(key)
                    if starts is None:
                        table[key] = [end]
                    else:
                        starts.append(end)
            toks.append(t)

    def propose(self, k: int) -> tuple[int, list[int], int]:
        """(n of the longest match, up to k tokens that followed it, where they start);
        (0, [], -1) if nothing matches."""
        toks, end = self.tokens, len(self.tokens)
        for n in range(self.n_max, self.n_min - 1, -1):
            if end < n:
                continue
            starts = self._tables[n].get(tuple(toks[end - n :]))
            if starts:
                i = bisect.bisect_right(starts, self.cursor) if self.cursor >= 0 else len(starts)
                start = starts[i] if i < len(starts) else starts[-1]
                return n, toks[start : start + k], start
        return 0, [], -1

    def accepted(self, start: int, count: int) -> None:
        """``count`` tokens proposed from ``start`` were kept: the copy continues there."""
        if count > 0 and start >= 0:  # (a proposal from elsewhere, start -1, moves no cursor)
            self.cursor = start + count
