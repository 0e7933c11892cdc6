"""The shipped benchmark suites: what they hold, as documented."""

from __future__ import annotations

from collections import Counter
from importlib import resources

from localspec.bench.suite import SUITES, suite, suites

SPEC_BENCH_KINDS = {"mt-bench", "translation", "summarization", "qa", "math_reasoning", "rag"}


def test_the_spec_bench_sample_has_four_first_turns_of_each_category_and_its_licence():
    prompts = suite("specbench")
    assert Counter(p.kind for p in prompts) == {kind: 4 for kind in SPEC_BENCH_KINDS}
    assert len({p.prompt for p in prompts}) == 24
    # the documented sample: questions 0, 20, 40, 60 of each category (ids 81 to 541 by 20)
    assert [int(p.name.rsplit("-", 1)[1]) for p in prompts] == list(range(81, 542, 20))
    licence = resources.files("localspec.bench").joinpath("SPEC-BENCH-LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in licence and "hemingkx/Spec-Bench" in licence


def test_the_edit_prompts_are_eight_and_unlike_every_other_suites():
    edits = suite("edits")
    assert len(edits) == 8 and len({p.name for p in edits}) == 8
    others = [p for name in SUITES if name != "edits" for p in suite(name)]
    for e in edits:
        body = e.prompt.split("```")[1]  # the file to edit
        assert all(body not in o.prompt for o in others), e.name
        assert e.name not in {o.name for o in others}


def test_all_is_every_suite_once():
    assert len(suites("all")) == sum(len(suite(n)) for n in SUITES)
    assert [p.name for p in suites("edits,edits")] == [p.name for p in suite("edits")]
