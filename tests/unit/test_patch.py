"""The prompt's diffs applied, as a source the answer's copy can follow (spec/patch.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from localspec.bench.replay import mod_rule, replay
from localspec.engine.spec.patch import diff_hints, patched
from localspec.engine.spec.policy import SpecPolicy
from localspec.types import SpecConfig

FILE = """def area(w, h):
    return w * h


def perimeter(w, h):
    total = 2 * w
    total += 2 * h
    return total


def describe(w, h):
    return f"{w}x{h}"
"""

# hand-written as in a prompt: line numbers wrong, a blank context line without its
# space, a hunk that does not apply (left out)
DIFF = """--- a/shapes.py
+++ b/shapes.py
@@ -1,2 +1,3 @@
 def area(w, h):
+    assert w >= 0 and h >= 0
     return w * h
@@ -40,7 +40,4 @@
 def perimeter(w, h):
-    total = 2 * w
-    total += 2 * h
-    return total
+    return 2 * (w + h)
 

 def describe(w, h):
@@ -90,2 +90,2 @@
-def volume(w, h, d):
+def volume(w, h, d=1):
"""

PATCHED = """def area(w, h):
    assert w >= 0 and h >= 0
    return w * h


def perimeter(w, h):
    return 2 * (w + h)


def describe(w, h):
    return f"{w}x{h}"
"""


def prompt_with(diff: str) -> str:
    return f"Apply this diff.\n\nFile: shapes.py\n```python\n{FILE}```\n\nDiff:\n```diff\n{diff}```\n\nAnswer with the file."


def test_a_hand_written_diff_is_applied_by_its_lines_not_its_numbers():
    (text,) = patched(prompt_with(DIFF))
    assert PATCHED in text
    assert "@@" not in text and "+    return 2" not in text  # the diff itself is left out
    assert text.startswith("Apply this diff.")  # the text around it is kept


def test_text_without_a_diff_or_with_one_that_applies_nowhere_gives_nothing():
    assert patched(prompt_with("")) == []
    assert patched("@@ -1 +1 @@\n-x = 1\n+x = 2\n") == []  # nothing to apply it to
    assert patched(prompt_with("@@ -1,1 +1,1 @@\n-not in the file\n+nor this\n")) == []


def test_a_hostile_prompt_of_many_hunks_costs_little():
    """Thousands of hunks whose first line is everywhere (a blank line) in a text of
    thousands of blank lines: placing them stops at the prompt's budget of comparisons."""
    text = "\n" * 20000 + "".join("@@ -1,2 +1,1 @@\n \n-x\n" for _ in range(5000))
    t0 = time.perf_counter()
    assert patched(text) == []
    assert time.perf_counter() - t0 < 8.0  # without the budget it would make ~10**8 comparisons


AGENT = Path(__file__).parent / "data" / "qwen2.5-coder-1.5b-agent-greedy.json"  # localspec/bench/agent.jsonl
STEEP = {1: 45.0, 2: 90.0, 3: 119.0, 4: 146.0, 8: 315.0, 16: 408.0, 32: 672.0, 64: 1038.0}  # a 2-core CPU


@pytest.fixture(scope="module")
def qwen_tokenizer(qwen_05b: Path):
    from localspec.engine import backend

    model = backend.Model(qwen_05b)  # Qwen2.5-Coder-0.5B's tokenizer is the 1.5B's
    yield model
    model.close()


def test_the_policy_indexes_the_patched_file_after_the_prompt(qwen_tokenizer):
    prompt = qwen_tokenizer.tokenize(prompt_with(DIFF), add_special=False, parse_special=False)
    policy = SpecPolicy(None)
    policy.tokenizer = qwen_tokenizer
    spec = policy.start(prompt, SpecConfig(mode="ngram"))
    copy = spec.copy
    assert copy.hint > 0 and copy.prompt == len(prompt) + copy.hint
    hint = copy.index.tokens[len(prompt) : copy.prompt]
    assert PATCHED in b"".join(qwen_tokenizer.token_to_piece(t) for t in hint).decode()
    assert copy.own_position(len(prompt) - 1) == len(prompt) - 1  # the prompt: where it is
    assert copy.own_position(len(prompt)) == -1  # the hint: not in the request's text
    assert copy.own_position(len(prompt) + copy.hint) == len(prompt)  # the output: after the prompt
    plain = SpecPolicy(None).start(prompt, SpecConfig(mode="ngram"))
    assert plain.copy.hint == 0  # without a tokenizer (or a diff): the prompt alone


@pytest.mark.parametrize("name", ["a-diff-py", "a-diff-js"])
def test_on_recorded_diff_answers_the_patched_file_drafts_through_the_hunks(qwen_tokenizer, name: str):
    """Replayed on Qwen2.5-Coder-1.5B's answers to the diff prompts, with the steep costs
    of a 2-core CPU: reading the diff makes speculation faster than without it, and at
    least as fast as llama.cpp's ngram-mod rule."""
    rec = json.loads(AGENT.read_text())[name]
    table = {b: t / 1000 for b, t in STEEP.items()}
    blind = replay(rec["prompt"], rec["truth"], table).speedup
    reading = replay(rec["prompt"], rec["truth"], table, tokenizer=qwen_tokenizer).speedup
    assert reading > blind * 1.1
    assert reading >= mod_rule(rec["prompt"], rec["truth"], table)
    assert diff_hints(qwen_tokenizer, rec["prompt"])  # the recorded prompt's diff applies
