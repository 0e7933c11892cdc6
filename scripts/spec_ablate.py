"""Ablate speculation's rules on recorded greedy outputs: each rule switched off in turn,
the engine's policy replayed (``localspec.bench.replay``) on every output and cost shape,
against the rules as they are. A rule earns its place where switching it off loses on
prompts nobody here wrote (Spec-Bench's sample, the edit prompts), not only on the
project's own recorded answers.

    python scripts/spec_ablate.py RECORDED.json [MORE.json ...] [--model M.gguf] [--rules a,b] [--shapes steep,gpu]

``--model`` (the model that wrote the outputs) gives the policy its tokenizer, as in the
engine: the prompts' diffs are applied (rule patch).

Outputs are replayed in file order with one store of earlier requests' texts (as a
``serve`` session or a bench run would keep it), so the store's rules are judged on
unrelated traffic too. Printed per shape: the geometric mean by category and overall,
the worst output, and how many are below 0.97x plain, with and without each rule.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

from localspec.bench.replay import replay
from localspec.engine.spec import copy as copymod
from localspec.engine.spec import store as storemod
from localspec.engine.spec.ngram import NgramIndex
from localspec.engine.spec.policy import SpecPolicy
from localspec.engine.spec.state import SpecState
from localspec.engine.spec.store import Recall, Store
from localspec.engine.spec.suffix import SuffixIndex
from localspec.engine.spec.tuning import TUNING

SHAPES = {  # ms by batch size
    "steep": {1: 45, 2: 90, 3: 119, 4: 146, 8: 315, 16: 408, 32: 672, 64: 1038},  # 2-core CPU
    "epyc": {1: 34, 2: 57, 3: 75, 4: 90, 8: 155, 12: 203, 16: 196, 24: 318, 32: 368, 48: 473, 64: 606},
    # Qwen2.5-Coder-0.5B on a 2-core EPYC (calibrated 2026-12-07): two rows cost two steps
    "steep2": {1: 19.2, 2: 38.4, 3: 44.0, 4: 51.1, 8: 83.4, 16: 126, 32: 222, 64: 370},
    "tiled": {1: 1.0, 2: 1.65, 4: 2.6, 8: 4.5, 16: 5.7, 32: 10.7, 48: 13.8, 64: 17.6},
    "gpu": {1: 10.0, 2: 10.0, 4: 10.2, 8: 10.3, 16: 10.5, 32: 11.0, 64: 12.0, 128: 14.0},
}


@contextlib.contextmanager
def tuned(**values: object) -> Iterator[None]:
    """TUNING with some fields changed (it is frozen: shared by every module)."""
    old = {k: getattr(TUNING, k) for k in values}
    try:
        for k, v in values.items():
            object.__setattr__(TUNING, k, v)
        yield
    finally:
        for k, v in old.items():
            object.__setattr__(TUNING, k, v)


def patched(target: object, name: str, make: Callable[[Callable], Callable]) -> Callable[[], contextlib.AbstractContextManager]:
    return lambda: mock.patch.object(target, name, make(getattr(target, name)))


def _no_edits(resume: Callable) -> Callable:
    def run(self: copymod.CopyTracker) -> None:
        resume(self)
        self.edits.clear()
    return run


def _no_resume(_: Callable) -> Callable:
    def run(self: copymod.CopyTracker) -> None:
        self.broke = None
    return run


def _no_copy_tracker(start: Callable) -> Callable:
    def run(self, prompt, config, store_key=""):
        spec = start(self, prompt, config, store_key)
        if spec is not None:
            spec.copy = None
        return spec
    return run


RULES: dict[str, tuple[str, Callable[[], contextlib.AbstractContextManager]]] = {
    "ledger": ("the bound on loss (ledger.py)", lambda: tuned(loss_drafts=1e9)),
    "shadow": ("undrafted n-gram proposals judged for free",
               patched(SpecState, "shadow_proposal", lambda f: lambda self, order, tokens, start: None)),
    "run-depth": ("short n-grams costed no deeper than the longest match",
                  patched(SpecState, "run_depth", lambda f: lambda self: self.kept_in_a_row)),
    "run-cap": ("an unjudged run band no better than the one before", lambda: tuned(run_sure=0.0)),
    "ngram-cursor": ("n-gram lookup prefers the occurrence after the last kept copy",
                     patched(NgramIndex, "accepted", lambda f: lambda self, start, count: None)),
    "ngram": ("the short n-gram index proposes at all",
              patched(NgramIndex, "propose", lambda f: lambda self, k: (0, [], -1))),
    "copy": ("the copy tracker: long matches of the request's own text propose",
             patched(SpecPolicy, "start", _no_copy_tracker)),
    "copy-resume": ("a broken copy resumes just past the edit (copy_resync)",
                    patched(copymod.CopyTracker, "_resume", _no_resume)),
    "copy-edits": ("edits learnt and written where the source repeats them",
                   patched(copymod.CopyTracker, "_resume", _no_edits)),
    "seat-branch": ("a copy is seated only where every earlier occurrence of the match went on alike",
                    patched(SuffixIndex, "branches", lambda f: lambda self: False)),
    "fresh": ("quotes right after the answer's own writing judged at 4x the failure rate",
              patched(SpecState, "writing", lambda f: lambda self: False)),
    "own-scale": ("copies of the answer's own text start at 4x the failure rate",
                  lambda: tuned(match_scale_prior=1.0)),
    "scale-learnt": ("the failure scale learnt from the text's judged matches",
                     lambda: tuned(match_scale_weight=1e9)),
    "store-evidence": ("a stored match counts only within the output",
                       patched(Recall, "evidence", lambda f: lambda self, n: n)),
    "store-follow": ("the output follows a stored text through its edits",
                     patched(storemod, "resync", lambda f: lambda *a, **k: None)),
    "store": ("earlier requests' texts propose", lambda: mock.patch.object(Store, "recall", lambda *a, **k: None)),
    "patch": ("a prompt's diffs applied and indexed (needs --model)",
              lambda: mock.patch("localspec.engine.spec.policy.diff_hints", lambda *a, **k: [])),
}


def category(name: str) -> str:
    """sb-<category>-N, e-<kind>-<lang>, or the name itself for the project's answers."""
    if name.startswith("sb-"):
        return name[3:].rsplit("-", 1)[0]
    if name.startswith("e-"):
        return "edits"
    return "own"


def run(data: dict[str, dict], table: dict[int, float], tokenizer: object = None) -> dict[str, float]:
    store = Store()
    out = {}
    cap = max(len(d["truth"]) for d in data.values())  # the limit they were recorded under
    for name, d in data.items():
        out[name] = replay(d["prompt"], d["truth"], table, tokenizer=tokenizer, store=store,
                           max_tokens=d.get("max_tokens", cap)).speedup
        store.add("", d["prompt"] + d["truth"])
    return out


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def summary(speedups: dict[str, float]) -> dict[str, float]:
    cats: dict[str, list[float]] = {}
    for name, s in speedups.items():
        cats.setdefault(category(name), []).append(s)
    out = {c: geomean(v) for c, v in sorted(cats.items())}
    out["all"] = geomean(list(speedups.values()))
    out["public"] = geomean([s for n, s in speedups.items() if category(n) != "own"])
    out["worst"] = min(speedups.values())
    out["below"] = sum(s < 0.97 for s in speedups.values())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recorded", nargs="+")
    ap.add_argument("--rules", default=",".join(RULES), help="comma-separated; a+b switches both off at once")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--per-prompt", action="store_true", help="each output's speedup under each ablation")
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--model", help="the GGUF that wrote the outputs: its tokenizer")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a TUNING constant changed for every run (to try a value before it lands)")
    args = ap.parse_args()
    changed = {name: type(getattr(TUNING, name))(value) for name, value in (kv.split("=", 1) for kv in args.set)}
    stack = contextlib.ExitStack()
    stack.enter_context(tuned(**changed))
    data: dict[str, dict] = {}
    for path in args.recorded:
        data.update(json.loads(Path(path).read_text()))
    tokenizer = None
    if args.model:
        from localspec.engine.backend import Model
        tokenizer = Model(args.model)
    results: dict[str, dict[str, dict[str, float]]] = {}
    if args.rules == "none":
        args.rules = ""
    for shape in args.shapes.split(","):
        table = {b: t / 1000 for b, t in SHAPES[shape].items()}
        base = run(data, table, tokenizer)
        results[shape] = {"(all rules)": base}
        for rule in filter(None, args.rules.split(",")):
            with contextlib.ExitStack() as stack:  # "a+b": both off together
                for part in rule.split("+"):
                    stack.enter_context(RULES[part][1]())
                results[shape][rule] = run(data, table, tokenizer)
        base_s = summary(base)
        cols = [c for c in base_s if c not in ("worst", "below")]
        print(f"\n== {shape}: geometric mean by category (Δ against all rules), worst, below 0.97x")
        print(f"{'without':16s} " + " ".join(f"{c[:10]:>10s}" for c in cols) + "   worst below")
        for rule, sp in results[shape].items():
            s = summary(sp)
            cells = [f"{s[c]:10.3f}" if rule == "(all rules)" else f"{s[c] - base_s[c]:+10.3f}" for c in cols]
            print(f"{rule:16s} " + " ".join(cells) + f"   {s['worst']:5.2f} {s['below']:3d}", flush=True)
            if args.per_prompt and rule != "(all rules)":
                moved = {n: (base[n], v) for n, v in sp.items() if abs(v - base[n]) > 0.01}
                for n, (b, v) in sorted(moved.items(), key=lambda kv: kv[1][1] - kv[1][0]):
                    print(f"    {n:24s} {b:5.2f} -> {v:5.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    for rule in dict.fromkeys(p for r in filter(None, args.rules.split(",")) for p in r.split("+")):
        print(f"{rule:16s} {RULES[rule][0]}")


if __name__ == "__main__":
    main()
