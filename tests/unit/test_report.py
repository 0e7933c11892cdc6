"""The bench's comparison with llama-server, per prompt."""

from __future__ import annotations

from localspec.bench.report import RunRecord, against_llama, first_difference


def _row(prompt: str, mode: str, ratio: float, drafted: int) -> RunRecord:
    return RunRecord(prompt, "k", mode, None, 256, 30.0 * ratio, ratio, mode, drafted=drafted)


def test_a_prompt_neither_side_drafted_on_is_said_to_have_run_plain():
    records = [
        _row("chat", "off", 1.0, 0), _row("chat", "ngram", 0.96, 0),
        _row("chat", "llama-server ngram-simple", 1.02, 0), _row("chat", "llama-server ngram-mod", 1.04, 0),
        _row("edit", "off", 1.0, 0), _row("edit", "ngram", 2.2, 230),
        _row("edit", "llama-server ngram-simple", 2.0, 240), _row("edit", "llama-server ngram-mod", 0.99, 0),
    ]
    rows = against_llama(records)
    assert rows["chat"]["llama_best"] == "ngram-mod" and rows["chat"]["ahead"] == round(0.96 / 1.04, 3)
    assert rows["chat"]["neither_drafted"] is True
    assert rows["edit"]["llama_best"] == "ngram-simple" and rows["edit"]["ahead"] == 1.1
    assert rows["edit"]["neither_drafted"] is False


def test_where_texts_part_from_plain_is_told_in_characters_for_both_sides():
    ours = _row("rename", "ngram", 1.7, 300)
    ours.identical, ours.first_difference, ours.first_difference_char = False, 230, 884
    simple = _row("rename", "llama-server ngram-simple", 1.1, 280)
    simple.identical, simple.first_difference, simple.first_difference_char = False, 884, 884
    records = [_row("rename", "off", 1.0, 0), ours, _row("rename", "llama-server plain", 1.0, 0), simple,
               _row("rename", "llama-server ngram-mod", 1.0, 190), _row("same", "ngram", 2.0, 200),
               _row("same", "llama-server ngram-mod", 1.5, 200)]
    rows = against_llama(records)
    assert rows["rename"]["parts_at"] == 884 and rows["rename"]["llama_parts_at"] == {"ngram-simple": 884}
    assert rows["same"]["parts_at"] is None and rows["same"]["llama_parts_at"] == {}
    assert first_difference("abcd", "abXd") == 2 and first_difference("ab", "abc") == 2
