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

from localspec.engine.spec.copy import resync
from localspec.engine.spec.suffix import SuffixIndex
from localspec.engine.spec.tuning import TUNING



class Store:
    """Recent texts by key, at most ``budget`` tokens per key, oldest evicted first."""

    def __init__(self, budget: int = TUNING.store_tokens, max_texts: int = TUNING.store_texts) -> None:
        self.budget, self.max_texts = budget, max_texts
        self._texts: dict[str, deque[SuffixIndex]] = {}
        self._lock = threading.Lock()

    def add(self, key: str, tokens: list[int]) -> None:
        if len(tokens) < TUNING.store_min_text or self.budget <= 0:
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
        recall.extend(context[-TUNING.store_context:])
        recall.begin_output(min(TUNING.store_context, len(context)))
        return recall


@dataclass
class Recall:
    """A request's text end, matched against each stored text as tokens come, and the
    stored text its output copies, followed through small edits."""

    texts: list[SuffixIndex]
    states: list[tuple[int, int]] = field(default_factory=list)  # per text: (state, match length)
    context: int = 0  # the prompt's last tokens it was started on
    written: int = 0  # tokens since: the request's output
    output: bool = False  # whether tokens now extended are the output's
    # The stored text the output copies: (text, its next position, output tokens that
    # followed it), and where the output last parted from it: (text, position, tokens
    # followed, ``written`` then).
    follow: tuple[int, int, int] | None = None
    parted: tuple[int, int, int, int] | None = None
    recent: deque[int] = field(default_factory=lambda: deque(maxlen=TUNING.copy_resync))  # the output's last tokens

    def __post_init__(self) -> None:
        self.states = [(0, 0)] * len(self.texts)

    def begin_output(self, context: int) -> None:
        """The prompt's ``context`` last tokens were matched; the output's come next."""
        self.context, self.written, self.output = context, 0, True

    def extend(self, tokens: list[int]) -> None:
        for token in tokens:
            self.states = [text.step(state, length, token)
                           for text, (state, length) in zip(self.texts, self.states)]
            if self.output:
                self.written += 1
                self._follow(token)

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

    def draft(self, k: int) -> tuple[int, list[int]]:
        """(the evidence, up to ``k`` tokens to draft): the stored text the output copies,
        from where it has got to, on the tokens it has followed; else the longest match."""
        if self.follow is not None:
            t, at, run = self.follow
            tokens = self.texts[t].tokens[at : at + k]
            if tokens:
                return run, tokens
        n, tokens = self.propose(k)
        return self.evidence(n), tokens

    def _follow(self, token: int) -> None:
        """Keep the place in the stored text the output copies. A retry's answer copies
        an earlier one with a word changed here and there (the prompt differs by a note);
        the longest match then starts afresh at each change and proposes again only 8
        tokens on. Instead, where the output writes, within a few tokens of parting, what
        came just after the place it parted (an edit, as in copy.py), it follows on, with
        the evidence of all it followed before. On the agent trace's replay, store/alone
        rose 1.138 -> 1.190 (steep costs), 1.218 -> 1.252 (this EPYC's), 1.496 -> 1.535
        (H200's)."""
        self.recent.append(token)
        if self.follow is not None:
            t, at, run = self.follow
            tokens = self.texts[t].tokens
            if at < len(tokens) and tokens[at] == token:
                self.follow = (t, at + 1, run + 1)
                return
            self.follow, self.parted = None, (t, at, run, self.written)
        if self.parted is not None:
            t, at, run, when = self.parted
            if self.written - when > TUNING.edit_give_up:
                self.parted = None
            elif self.written - when >= TUNING.copy_resync:
                skip = resync(self.texts[t].tokens, at, list(self.recent))
                if skip is not None:  # the same rule as the request's own copy (copy.py)
                    self.follow, self.parted = (t, at + skip + TUNING.copy_resync, run), None
                    return
        if self.follow is None:  # the longest match, once long enough, is the text followed
            best = max(range(len(self.texts)), key=lambda i: self.states[i][1])
            state, length = self.states[best]
            evidence = self.evidence(length)
            if evidence >= TUNING.store_follow_min:
                self.follow = (best, self.texts[best].after_position(state), evidence)
