"""The suffix index: the longest earlier match of the text's end, checked against brute
force after every token, on random texts over small alphabets and on a real rewrite."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from localspec.engine.spec.suffix import SuffixIndex


def brute(tokens: list[int]) -> tuple[int, set[int]]:
    """The longest suffix that also ends earlier, and every place just after such an end."""
    n = len(tokens)
    for length in range(n - 1, 0, -1):
        tail = tokens[n - length :]
        ends = {e for e in range(length - 1, n - 1) if tokens[e - length + 1 : e + 1] == tail}
        if ends:
            return length, {e + 1 for e in ends}
    return 0, set()


@pytest.mark.parametrize("alphabet,seed", [(2, 0), (3, 1), (5, 2), (40, 3)])
def test_the_longest_match_after_every_token_equals_brute_force(alphabet: int, seed: int):
    rng = random.Random(seed)
    index = SuffixIndex()
    tokens: list[int] = []
    for _ in range(300):
        t = rng.randrange(alphabet)
        tokens.append(t)
        index.extend([t])
        length, starts = brute(tokens)
        got, start = index.match()
        assert got == length
        if length:
            assert start in starts and start == min(starts)  # the first earlier occurrence
            assert tokens[start - length : start] == tokens[-length:]


def test_extending_in_chunks_is_extending_one_by_one():
    rng = random.Random(7)
    tokens = [rng.randrange(4) for _ in range(500)]
    whole, pieces = SuffixIndex(tokens), SuffixIndex()
    at = 0
    while at < len(tokens):
        step = rng.randrange(1, 30)
        pieces.extend(tokens[at : at + step])
        at += step
    assert whole.match() == pieces.match() and whole.tokens == pieces.tokens


def test_a_copy_proposes_what_followed_and_the_match_grows():
    src = list(range(100, 160))
    index = SuffixIndex(src + [1, 2] + src[:10])  # a copy of src has begun
    n, proposal = index.propose(8)
    assert n == 10 and proposal == src[10:18]
    index.extend(src[10:30])
    assert index.propose(4) == (30, src[30:34])
    index.extend([999])  # an edit: the long match is gone
    assert index.match() == (0, -1)
    assert SuffixIndex([5]).propose(4) == (0, []) and SuffixIndex().match() == (0, -1)


def test_on_recorded_answers_long_matches_predict_the_next_token():
    """Qwen2.5-Coder-1.5B's recorded greedy answers (prompt and output tokens): on the
    code edits most output tokens follow a match of 8 tokens or more, and such a match's
    proposal is the next token far more often than a short match's."""
    data = json.loads((Path(__file__).parent / "data" / "qwen2.5-coder-1.5b-greedy.json").read_text())
    hits = {True: [0, 0], False: [0, 0]}  # long match? -> [proposals, right]
    for name in ("code-edit-1", "code-edit-2"):
        index = SuffixIndex(data[name]["prompt"])
        for t in data[name]["truth"]:
            n, proposal = index.propose(1)
            if n:
                hits[n >= 8][0] += 1
                hits[n >= 8][1] += proposal == [t]
            index.extend([t])
    long_rate, short_rate = hits[True][1] / hits[True][0], hits[False][1] / max(1, hits[False][0])
    assert hits[True][0] > 100 and long_rate > 0.8 and long_rate > short_rate + 0.2, hits
