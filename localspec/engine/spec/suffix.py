"""The longest earlier match of the text's end, of any length: a suffix automaton over
token ids, extended one token at a time.

An n-gram index sees at most n tokens back, so it cannot tell a long copy (an edited file
written out again, thirty tokens matching) from a coincidence (three). The automaton
knows at every step the longest suffix of the text that occurred before, and where its
first occurrence ended; what followed that occurrence is the proposal, and the match's
length is the evidence for how much of it will hold.

Construction is the classic online algorithm (Blumer et al. 1985): amortised O(1) per
token, at most 2n states. ``first_end`` of a state is where its strings first ended.
"""

from __future__ import annotations


class SuffixIndex:
    """``extend`` with the tokens as they come; ``match`` says how long the text's end
    matched earlier, and ``propose`` what followed there."""

    def __init__(self, tokens: list[int] | None = None) -> None:
        self.tokens: list[int] = []
        self._next: list[dict[int, int]] = [{}]  # transitions per state
        self._link: list[int] = [-1]  # suffix links
        self._len: list[int] = [0]  # the longest string of each state
        self._first_end: list[int] = [-1]  # where that state's strings first ended
        self._last = 0  # the state of the whole text
        if tokens:
            self.extend(tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def extend(self, tokens: list[int]) -> None:
        for token in tokens:
            self._add(token)

    def _add(self, token: int) -> None:
        nxt, link, length, first = self._next, self._link, self._len, self._first_end
        pos = len(self.tokens)
        self.tokens.append(token)
        cur = len(length)
        nxt.append({})
        link.append(0)
        length.append(length[self._last] + 1)
        first.append(pos)
        p = self._last
        while p != -1 and token not in nxt[p]:
            nxt[p][token] = cur
            p = link[p]
        if p != -1:
            q = nxt[p][token]
            if length[p] + 1 == length[q]:
                link[cur] = q
            else:  # split q: a clone keeps the shorter strings, which now also end here
                clone = len(length)
                nxt.append(dict(nxt[q]))
                link.append(link[q])
                length.append(length[p] + 1)
                first.append(first[q])
                while p != -1 and nxt[p].get(token) == q:
                    nxt[p][token] = clone
                    p = link[p]
                link[q] = clone
                link[cur] = clone
        self._last = cur

    def match(self) -> tuple[int, int]:
        """(length of the longest suffix of the text that also occurred earlier, the
        position just after that earlier occurrence); (0, -1) when none did."""
        state = self._link[self._last] if self._last else -1
        if state <= 0:
            return 0, -1
        return self._len[state], self._first_end[state] + 1

    def propose(self, k: int) -> tuple[int, list[int]]:
        """(match length, up to ``k`` tokens that followed the earlier occurrence)."""
        n, start = self.match()
        if n == 0 or k <= 0:
            return 0, []
        return n, self.tokens[start : start + k]

    def branches(self) -> bool:
        """Whether the text's longest earlier match was followed by different tokens at
        different earlier occurrences (the next token is then a guess between them)."""
        state = self._link[self._last] if self._last else -1
        return state > 0 and len(self._next[state]) > 1

    def step(self, state: int, length: int, token: int) -> tuple[int, int]:
        """Matching another text against this one, a token at a time: from the state and
        length of the longest suffix of that text that occurs here, the state and length
        once ``token`` is appended (amortised O(1))."""
        nxt, link = self._next, self._link
        while state and token not in nxt[state]:
            state = link[state]
            length = self._len[state]
        if token in nxt[state]:
            return nxt[state][token], length + 1
        return 0, 0

    def after_position(self, state: int) -> int:
        """Where the tokens after the first occurrence of ``state``'s strings start."""
        return self._first_end[state] + 1

    def after(self, state: int, k: int) -> list[int]:
        """Up to ``k`` tokens that follow the first occurrence of ``state``'s strings."""
        start = self.after_position(state)
        return self.tokens[start : start + k]
