"""`localspec chat` driven as a user drives it: through a pseudo-terminal (pexpect) on
SmolLM2, and from a pipe."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pexpect = pytest.importorskip("pexpect")

pytestmark = pytest.mark.smollm
PROMPT = ">>>"  # prompt_toolkit draws the space as a cursor move
DONE = re.compile(r"(\d+) tokens · [\d.]+ tok/s")  # the --stats line after each answer


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, LOCALSPEC_DATA_DIR=str(tmp_path / "data"), PROMPT_TOOLKIT_NO_CPR="1",
               TERM="xterm", COLUMNS="120", LINES="40")
    env.pop("NO_COLOR", None)
    return env


def spawn(smollm2: Path, tmp_path: Path, *args: str) -> pexpect.spawn:
    child = pexpect.spawn(sys.executable, ["-m", "localspec", "chat", str(smollm2), "--temperature", "0", *args],
                          env=_env(tmp_path), encoding="utf-8", timeout=60, dimensions=(40, 120))
    child.expect_exact(PROMPT)
    return child


def ask(child: pexpect.spawn, text: str) -> str:
    """Send a message; return what was shown up to the --stats line."""
    child.sendline(text)
    child.expect(DONE)
    shown = child.before
    child.expect_exact(PROMPT)
    return shown


def command(child: pexpect.spawn, text: str, shows: str) -> str:
    """Send a slash command; wait for ``shows`` (a regex) in its output, then the prompt."""
    child.sendline(text)
    child.expect(shows)
    shown = child.before + child.after
    child.expect_exact(PROMPT)
    return shown


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\r", "", text)


def test_two_turns_prefill_only_the_new_one_and_ctrl_d_exits_0(smollm2: Path, tmp_path: Path):
    child = spawn(smollm2, tmp_path, "-n", "24", "--stats", "--plain")
    ask(child, "What is the capital of France?")
    first = _plain(command(child, "/stats", "accepted per step|speculation: off"))
    ask(child, "And of Italy?")
    second = _plain(command(child, "/stats", "accepted per step|speculation: off"))
    p1 = int(re.search(r"prompt: (\d+) tokens", first).group(1))
    total, reused, prefilled = map(int, re.search(r"prompt: (\d+) tokens, (\d+) reused from the cache, (\d+) prefilled",
                                                  second).groups())
    assert reused >= p1 + 24 - 2  # the first question and its answer came from the cache
    assert prefilled <= total - (p1 + 24) + 2  # only the new turn was prefilled
    child.sendcontrol("d")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_save_then_load_in_a_new_process_gives_the_same_next_answer(smollm2: Path, tmp_path: Path):
    saved = tmp_path / "talk.json"
    child = spawn(smollm2, tmp_path, "-n", "16", "--stats", "--plain", "--spec", "off")
    child.send("Name a fruit.\x1b\rJust one.\r")  # Alt-Enter starts a new line; Enter sends
    child.expect(DONE)
    child.expect_exact(PROMPT)
    ask(child, "Name a colour.")
    command(child, f"/save {saved}", "Saved 4 messages")
    want = _plain(ask(child, "Name an animal."))
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    data = json.loads(saved.read_text())
    assert [m["role"] for m in data["messages"]] == ["user", "assistant", "user", "assistant"]
    assert data["messages"][0]["content"] == "Name a fruit.\nJust one."
    assert data["settings"]["temperature"] == 0.0 and data["settings"]["max_tokens"] == 16

    assert "Name a colour." in (tmp_path / "data" / "chat-history").read_text()  # line history, across runs
    again = spawn(smollm2, tmp_path, "--stats", "--plain")  # no -n: the file's settings come back
    command(again, f"/load {saved}", "Loaded 4 messages")
    got = _plain(ask(again, "Name an animal."))
    # after the last echo of the question: history may first show it as a suggestion
    assert got.rsplit("Name an animal.", 1)[-1].strip() == want.rsplit("Name an animal.", 1)[-1].strip()
    again.sendline("/exit")
    again.expect(pexpect.EOF)


def test_ctrl_c_stops_an_answer_and_the_chat_goes_on(smollm2: Path, tmp_path: Path):
    """With no output flags: the answer is rendered as Markdown on the terminal."""
    child = spawn(smollm2, tmp_path, "--stats")
    child.sendline("Count from 1 to 1000, one number per line.")
    child.expect_exact("\x1b[?2004l")  # the prompt has let the terminal go: the answer is under way
    child.expect(r"(\d+\D+){8}")
    time.sleep(0.5)
    child.sendintr()
    child.expect_exact("[interrupted]")
    child.expect_exact(PROMPT)
    shown = _plain(ask(child, "Say hello."))
    assert DONE.search(shown) is None  # (the stats line was the match)
    stats = _plain(command(child, "/stats", "accepted per step|speculation: off"))
    assert "finish" in stats and "reused" in stats
    child.sendintr()  # Ctrl-C at the prompt clears the line
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_bad_commands_print_one_line_and_the_chat_goes_on(smollm2: Path, tmp_path: Path):
    child = spawn(smollm2, tmp_path, "-n", "8", "--stats", "--plain")
    out = _plain(command(child, "/nope", "help lists them"))
    assert "Unknown command /nope; /help lists them" in out and "Traceback" not in out
    command(child, "/set temperature hot", "temperature: must be a number")
    out = _plain(command(child, "/set top_k -3", r"top_k: [^\r\n]+"))
    assert "Traceback" not in out
    command(child, "/spec draft", "No draft model is loaded")
    command(child, "/load /nonexistent/file.json", "Cannot read /nonexistent/file.json")
    command(child, "/set temperature 0.5", "temperature = 0.5")
    ask(child, "Hi!")
    child.sendline("/exit")
    child.expect(pexpect.EOF)


def test_history_overflow_drops_the_oldest_turns_with_a_notice(smollm2: Path, tmp_path: Path):
    child = spawn(smollm2, tmp_path, "-n", "40", "--ctx-size", "256", "--stats", "--plain")
    shown = ""
    for i in range(6):
        shown += ask(child, f"Question {i}: tell me about the number {i} in a few sentences please.")
    assert "outgrew the context (256 tokens): dropped the oldest" in _plain(shown)
    child.sendline("/exit")
    child.expect(pexpect.EOF)


def test_stdin_mode_three_lines_in_three_answers_out(smollm2: Path, tmp_path: Path):
    got = subprocess.run([sys.executable, "-m", "localspec", "chat", str(smollm2), "--temperature", "0", "-n", "12",
                          "--stats"],
                         input="Hello!\nWhat is 2+2?\nThank you.\n", capture_output=True, text=True, timeout=120,
                         env=_env(tmp_path))
    assert got.returncode == 0, got.stderr
    assert len(DONE.findall(got.stderr)) == 3
    assert len([line for line in got.stdout.splitlines() if line.strip()]) >= 3
    assert "\x1b[" not in got.stdout  # not a terminal: plain text


@pytest.mark.parametrize("no_color", [False, True])
def test_show_draft_colours_the_drafted_tokens_unless_no_color(smollm2: Path, tmp_path: Path, no_color: bool):
    env = _env(tmp_path)
    if no_color:
        env["NO_COLOR"] = "1"
    child = pexpect.spawn(sys.executable, ["-m", "localspec", "chat", str(smollm2), "--temperature", "0", "-n", "60",
                                           "--spec", "ngram", "--show-draft", "--stats"],
                          env=env, encoding="utf-8", timeout=60, dimensions=(40, 120))
    child.expect_exact(PROMPT)
    shown = ask(child, "What is the capital of France?")  # SmolLM2 at temperature 0 repeats itself
    # n-gram drafts are accepted on the repetition; their tokens are cyan unless NO_COLOR
    assert ("\x1b[36m" in shown) is not no_color
    child.sendline("/exit")
    child.expect(pexpect.EOF)


def test_a_thinking_models_reasoning_is_folded_and_unfolds_on_request(tmp_path: Path):
    """A template that opens a <think> block for the answer (as DeepSeek-R1's does): the
    tiny model never closes it, so all it writes is reasoning, shown folded to one line;
    /thinking shows it whole."""
    from tests.tinymodels import CHATML, TinySpec, write_tiny_model

    thinking = CHATML.replace("assistant\n'", "assistant\n<think>\n'")
    assert thinking != CHATML
    model = write_tiny_model(tmp_path / "thinker.gguf", TinySpec(chat_template=thinking))
    child = spawn(model, tmp_path, "-n", "12", "--stats", "--plain")
    shown = _plain(ask(child, "hello"))
    words = int(re.search(r"▸ thought for (\d+) words \(/thinking unfolds it\)", shown).group(1))
    assert words > 0 and shown.strip().splitlines()[-1].startswith("▸ thought for")  # nothing else was shown
    unfolded = _plain(command(child, "/thinking", r"\S+[^\n]*\n"))
    assert "thought for" not in unfolded and unfolded.strip()
    child.sendcontrol("d")
    child.expect(pexpect.EOF)


def test_save_name_keeps_the_kv_and_resume_answers_as_the_uninterrupted_chat(smollm2: Path, tmp_path: Path):
    """/save NAME keeps the history's KV state in the prompt cache; chat --resume NAME in
    a new process answers the next question as the chat that never stopped, having
    prefilled only the new turn (and what follows the last 512-token block)."""
    doc = " ".join(f"Item {i} costs {i * 3} euros." for i in range(90))  # ~900 tokens
    child = spawn(smollm2, tmp_path, "-n", "16", "--stats", "--plain", "--spec", "off")
    ask(child, doc + " How much does item 7 cost?")
    command(child, "/save shop", r"Saved 2 messages to shop \(and its KV state, \d{3,} tokens\)")
    want = _plain(ask(child, "And item 12?"))
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    assert (tmp_path / "data" / "chats" / "shop.json").is_file()

    again = spawn(smollm2, tmp_path, "--stats", "--plain", "--resume", "shop")
    got = _plain(ask(again, "And item 12?"))
    again.sendline("/stats")
    again.expect(r"(\d+) reused")
    reused = int(again.match.group(1))
    again.sendline("/exit")
    again.expect(pexpect.EOF)
    assert got.rsplit("And item 12?", 1)[-1].strip() == want.rsplit("And item 12?", 1)[-1].strip()
    assert reused >= 512
