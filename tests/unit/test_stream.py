"""UTF-8-safe text release and stop strings split across tokens."""

from __future__ import annotations

from localspec.engine.text import TextAssembler


def feed(assembler: TextAssembler, pieces: list[bytes]) -> list[str]:
    return [assembler.push(p) for p in pieces]


def test_a_character_split_across_tokens_is_released_whole():
    emoji = "😀".encode()
    a = TextAssembler()
    out = feed(a, [b"hi ", emoji[:1], emoji[1:3], emoji[3:], b"!"])
    assert out == ["hi ", "", "", "😀", "!"]
    assert a.finish() == ""


def test_a_dangling_partial_character_becomes_a_replacement_at_the_end():
    a = TextAssembler()
    assert a.push("é".encode()[:1]) == ""
    assert a.finish() == "\ufffd"


def test_invalid_bytes_become_replacement_characters_without_eating_text():
    a = TextAssembler()
    assert "".join(feed(a, [b"a\xff", b"b"])) + a.finish() == "a\ufffdb"


def test_stop_string_within_one_token():
    a = TextAssembler(["STOP"])
    assert a.push(b"hello STOP there") == "hello "
    assert a.stopped
    assert a.push(b"more") == ""
    assert a.text == "hello "


def test_stop_string_split_across_tokens_is_never_emitted():
    a = TextAssembler(["</answer>"])
    out = feed(a, [b"42 <", b"/ans", b"wer> trailing"])
    assert "".join(out) == "42 "
    assert a.stopped


def test_held_back_text_is_released_when_the_stop_string_does_not_complete():
    a = TextAssembler(["</answer>"])
    out = feed(a, [b"a </an", b"d b"])
    assert out == ["a ", "</and b"]
    assert not a.stopped


def test_held_back_prefix_is_released_at_the_end():
    a = TextAssembler(["###"])
    assert a.push(b"x ##") == "x "
    assert a.finish() == "##"
    assert a.text == "x ##"


def test_the_earliest_of_several_stop_strings_wins():
    a = TextAssembler(["world", "lo w"])
    assert a.push(b"hello world") == "hel"


def test_stop_string_made_of_multibyte_characters():
    stop = "çà"
    data = ("voilà " + stop + " fin").encode()
    a = TextAssembler([stop])
    out = "".join(a.push(data[i : i + 1]) for i in range(len(data)))
    assert out == "voilà "
