"""The copy tracker: a copy followed through the edits the answer makes to it."""

from __future__ import annotations

from localspec.engine.spec.copy import CopyTracker
from localspec.engine.spec.suffix import SuffixIndex
from localspec.engine.spec.tuning import TUNING

RESYNC = TUNING.copy_resync

OLD, NEW = [900, 901], [950, 951, 952]  # a name of two tokens renamed to one of three


def _file(name: list[int], uses: int = 5) -> list[int]:
    """A "file": 20 tokens of its own between uses of ``name``."""
    out: list[int] = []
    for i in range(uses):
        out += list(range(100 + 20 * i, 120 + 20 * i)) + name
    return out + list(range(500, 520))


def _write(tracker: CopyTracker, answer: list[int]) -> list[tuple[int, bool, bool] | None]:
    return [tracker.emitted(t) for t in answer]


def test_a_rename_is_learnt_at_its_first_occurrence_and_drafted_at_the_next():
    """The answer writes the file out with a name renamed: the copy breaks at the first
    renamed occurrence only; from then on the proposals write the new name and the copy
    goes on through it."""
    source, answer = _file(OLD), _file(NEW)
    tracker = CopyTracker(SuffixIndex(source), min_length=8)
    judged = _write(tracker, answer[:60])  # past the second use
    misses = [i for i, j in enumerate(judged) if j is not None and not j[1] and i >= 8]
    assert misses == [20]  # the first use of the new name, and nothing after it
    assert tracker.edits[OLD[0]] == [(tuple(OLD), tuple(NEW))]
    length, proposal, _ = tracker.propose(40)
    assert proposal == answer[60:100] and length >= 30  # through the third use


def test_an_edit_the_answer_does_not_repeat_is_forgotten():
    """Renamed once, then written as it was: the edit is dropped where it failed."""
    source = _file(OLD)
    answer = _file(NEW, uses=1)[:-20] + _file(OLD)[22:]
    tracker = CopyTracker(SuffixIndex(source), min_length=8)
    _write(tracker, answer[:45])  # the first use renamed, the second (at 43) written as before
    assert OLD[0] not in tracker.edits or not tracker.edits[OLD[0]]


def test_after_an_insertion_the_copy_resumes_once_the_source_is_followed_again():
    """Tokens inserted into a copied line (a type hint): after RESYNC tokens of the source
    the copy goes on from there, with no edit learnt (nothing was replaced)."""
    source = list(range(100, 200))
    answer = source[:30] + [7, 8, 9] + source[30:60]
    tracker = CopyTracker(SuffixIndex(source), min_length=8)
    _write(tracker, answer[: 33 + RESYNC])
    assert tracker.copy is not None and tracker.copy.at == 30 + RESYNC
    assert tracker.propose(10)[1] == source[30 + RESYNC : 40 + RESYNC]
    assert not tracker.edits


def test_no_copy_without_a_long_match():
    """Short matches (under min_length) seat no copy and propose nothing."""
    tracker = CopyTracker(SuffixIndex([1, 2, 3, 4, 5, 6, 7, 8, 9]), min_length=8)
    _write(tracker, [1, 2, 3])
    assert tracker.propose(5) == (0, [], -1)


def test_a_copy_of_the_prompt_is_told_from_a_copy_of_the_answers_own_text():
    """Every judged token says whether its copy quoted the prompt: a file written out
    again does, a block the answer repeats from its own output does not (the two hold
    97% and 42% at matches of 8-15 on recorded answers, so they are learnt apart)."""
    prompt = list(range(100, 140))
    block = list(range(500, 520))
    answer = prompt[:20] + [7] + block + [8] + block
    tracker = CopyTracker(SuffixIndex(prompt), min_length=8, prompt=len(prompt))
    judged = _write(tracker, answer)
    assert all(j[2] for j in judged[8:20])  # the quote, once 8 tokens long
    assert not any(j[2] for j in judged[-12:] if j is not None)  # the repeated block
    assert sum(1 for j in judged[-12:] if j is not None and j[1]) >= 10
