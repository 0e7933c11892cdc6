"""Drafts from earlier requests: a bounded store of recent prompts and outputs that a
request's text end is matched against, as it grows, by longest match.

An agent's loop re-sends the same files and repeats earlier answers request after
request; what it writes next has often been written in an earlier request, not in this
one. Each stored text keeps its own suffix automaton (built once, when its request ends),
and a request follows its end through every stored text's automaton (amortised O(1) per
token and text), so the longest earlier match is known at every step, whichever request
it lies in. Stores are kept apart by key (one per API key): nothing of one key's texts
can be proposed to another's requests. Bounded in tokens; the oldest texts go first.
Unrelated traffic costs a lookup per token and is never drafted on: the policy drafts
only where the expected gain pays.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from localspec.engine.spec.suffix import SuffixIndex

STORE_TOKENS = 32768  # tokens kept per key: a 1.5B model's automaton of that is ~40 MB of Python objects
MAX_TEXTS = 64  # texts kept per key (each costs a dict step per token of every request)
MIN_TEXT = 16  # shorter texts are not worth a lookup
CONTEXT = 256  # prompt tokens a new request matches from (a match is never longer than it needs)


class Store:
    """Recent texts by key, at most ``budget`` tokens per key, oldest evicted first."""

    def __init__(self, budget: int = STORE_TOKENS, max_texts: int = MAX_TEXTS) -> None:
        self.budget, self.max_texts = budget, max_texts
        self._texts: dict[str, deque[SuffixIndex]] = {}
        self._lock = threading.Lock()

    def add(self, key: str, tokens: list[int]) -> None:
        if len(tokens) < MIN_TEXT or self.budget <= 0:
            return
        text = SuffixIndex(tokens[-self.budget :])
        with self._lock:
            texts = self._texts.setdefault(key, deque())
            texts.append(text)
            while len(texts) > self.max_texts or sum(len(t) for t in texts) > self.budget:
                texts.popleft()

    def tokens(self, key: str) -> int:
        with self._lock:
            return sum(len(t) for t in self._texts.get(key, ()))

    def recall(self, key: str, context: list[int]) -> Recall | None:
        """A matcher over ``key``'s texts as they are now (texts stored later are not
        searched by this request), started on the end of ``context``."""
        with self._lock:
            texts = list(self._texts.get(key, ()))
        if not texts:
            return None
        recall = Recall(texts)
        recall.extend(context[-CONTEXT:])
        recall.context, recall.written = min(CONTEXT, len(context)), 0
        return recall


@dataclass
class Recall:
    """A request's text end, matched against each stored text as tokens come."""

    texts: list[SuffixIndex]
    states: list[tuple[int, int]] = field(default_factory=list)  # per text: (state, match length)
    context: int = 0  # the prompt's last tokens it was started on
    written: int = 0  # tokens since: the request's output

    def __post_init__(self) -> None:
        self.states = [(0, 0)] * len(self.texts)

    def extend(self, tokens: list[int]) -> None:
        self.written += len(tokens)
        for token in tokens:
            self.states = [text.step(state, length, token)
                           for text, (state, length) in zip(self.texts, self.states)]

    def propose(self, k: int) -> tuple[int, list[int]]:
        """(the longest match's length, up to ``k`` tokens that followed it there); (0, [])
        when no stored text matches or nothing follows the match."""
        best, tokens = 0, []
        for text, (state, length) in zip(self.texts, self.states):
            if length > best:
                after = text.after(state, k)
                if after:
                    best, tokens = length, after
        return best, tokens

    def evidence(self, n: int) -> int:
        """How much of a match of ``n`` says that the output goes on as the stored text
        did. An answer depends on its whole prompt, not on the prompt's last words: a
        request that ends like an earlier one ("... Output the whole file.", then the
        chat template) matches it for tens of tokens and then writes another answer (on
        the agent trace, 64-token drafts of the earlier answer kept 2). So only the part
        of a match within the output counts, unless the match covers all the prompt it
        started on (the same request sent again)."""
        return n if n >= self.written + self.context else min(n, self.written)
