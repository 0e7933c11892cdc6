"""The store of earlier requests' texts: the longest match of a request's text end across
them, followed token by token, bounded and kept apart by key."""

from __future__ import annotations

import random

from localspec.engine.spec.store import Store


def brute_longest(texts: list[list[int]], end: list[int]) -> int:
    """The longest suffix of ``end`` that occurs in some text with a token after it."""
    best = 0
    for text in texts:
        for n in range(1, len(end) + 1):
            pattern = end[-n:]
            if any(text[i:i + n] == pattern for i in range(len(text) - n)):
                best = max(best, n)
    return best


def test_the_longest_match_across_texts_is_followed_token_by_token():
    rng = random.Random(5)
    texts = [[rng.randrange(6) for _ in range(120)] for _ in range(4)]
    store = Store(budget=10_000)
    for text in texts:
        store.add("k", text)
    context = [rng.randrange(6) for _ in range(30)]
    recall = store.recall("k", context)
    seen = list(context)
    for _ in range(60):
        n, tokens = recall.propose(8)
        assert n == brute_longest(texts, seen[-256:])
        if n:  # what followed a match of that length somewhere
            assert any(any(t[i:i + n] == seen[-n:] and t[i + n:i + n + len(tokens)] == tokens
                           for i in range(len(t) - n)) for t in texts)
        token = rng.randrange(6)
        recall.extend([token])
        seen.append(token)


def test_an_earlier_answer_is_proposed_whole():
    store = Store()
    answer = list(range(100, 160))
    store.add("k", [1, 2, 3, 4, 5, 6, 7, 8, 9] + answer)
    recall = store.recall("k", [0, 0, 4, 5, 6, 7, 8, 9])  # another prompt that ends alike
    assert recall.propose(64) == (6, answer)
    recall.extend(answer[:10])
    assert recall.propose(4) == (16, answer[10:14])


def test_the_oldest_texts_go_first_and_the_budget_holds():
    store = Store(budget=100, max_texts=3)
    for i in range(5):
        store.add("k", [i * 1000 + j for j in range(40)])
    assert store.tokens("k") == 80  # the two newest 40-token texts fit 100
    assert store.recall("k", [0, 1, 2]).propose(4) == (0, [])  # the first is gone
    assert store.recall("k", [4000, 4001]).propose(3) == (2, [4002, 4003, 4004])
    small = Store(budget=10_000, max_texts=3)
    for i in range(5):
        small.add("k", [i * 1000 + j for j in range(40)])
    assert small.tokens("k") == 120  # three texts at most
    store.add("k", [7] * 5)  # too short to be worth a lookup
    assert store.tokens("k") == 80


def test_no_key_sees_anothers_texts():
    store = Store()
    secret = list(range(500, 560))
    store.add("alice", secret)
    assert store.recall("bob", secret[:20]) is None
    store.add("bob", list(range(900, 960)))
    assert store.recall("bob", secret[:20]).propose(8) == (0, [])
    assert store.recall("alice", secret[:20]).propose(3) == (20, secret[20:23])


def test_a_recall_searches_the_texts_stored_before_its_request():
    store = Store()
    store.add("k", list(range(50)))
    recall = store.recall("k", [10, 11])
    store.add("k", [10, 11, 99, 98, 97] * 5)
    assert recall.propose(2) == (2, [12, 13])


def test_only_the_part_of_a_match_within_the_output_is_evidence_unless_the_whole_prompt_matched():
    """Prompts that end alike ("... Output the whole file.", the chat template) are no
    sign of the same answer; the same prompt sent again is."""
    store = Store()
    answer = list(range(100, 160))
    store.add("k", [1, 2, 3, 4, 5, 6, 7, 8, 9] + answer)
    other = store.recall("k", [0, 0, 4, 5, 6, 7, 8, 9])  # another task, ending alike
    n, tokens = other.propose(64)
    assert (n, tokens) == (6, answer) and other.evidence(n) == 0
    other.extend(answer[:10])  # its output has followed the earlier answer for 10 tokens
    n, _ = other.propose(4)
    assert n == 16 and other.evidence(n) == 10
    again = store.recall("k", [1, 2, 3, 4, 5, 6, 7, 8, 9])  # the same request again
    n, _ = again.propose(64)
    assert n == 9 and again.evidence(n) == 9
    again.extend(answer[:3])
    assert again.evidence(again.propose(4)[0]) == 12


def test_the_stored_answer_the_output_copies_is_followed_through_an_edit():
    """A retry writes a word of its own in the earlier answer it copies: four tokens of
    what came just after, and it is followed on from there, on all it followed before;
    where it goes on writing its own text, the place is given up."""
    store = Store()
    prompt, answer = [1, 2, 3, 4, 5], list(range(100, 200))
    store.add("k", prompt + answer)
    recall = store.recall("k", [9, 9] + prompt)  # the same task with a note before it
    recall.extend(answer[:30])
    assert recall.draft(5) == (30, answer[30:35])
    recall.extend([999] + answer[31:35])  # answer[30] replaced by a word of its own
    assert recall.propose(5)[0] == 4  # the longest match starts again after the edit
    assert recall.draft(5) == (30, answer[35:40])  # the copy goes on, on the 30 tokens it followed before
    recall.extend([998] + list(range(500, 540)))  # it parts and writes on
    assert recall.follow is None and recall.parted is None
    assert recall.draft(5)[0] < 8  # nothing long enough to draft on
