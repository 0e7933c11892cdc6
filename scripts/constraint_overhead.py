"""What a constraint costs per token: decode tokens/s with and without a JSON constraint,
plain and n-gram, interleaved in one process (the machine's speed drifts), and the time
spent in the grammar (masks, checks, draft cuts) per emitted token.

    python scripts/constraint_overhead.py MODEL.gguf [--rounds 3] [--max-tokens 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from localspec.engine import Engine, EngineConfig
from localspec.engine import constraint as C
from localspec.types import Constraint, Message, Request, SamplingParams

HERE = Path(__file__).parent
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "version": {"type": "string"}, "port": {"type": "integer"},
    "database": {"type": "object"}, "queues": {"type": "object"}, "features": {"type": "object"},
    "logging": {"type": "object"}}, "required": ["name", "version", "port", "database"]}


def timed(fn, box):
    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            box[0] += time.perf_counter() - t
    return wrapper


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=200)
    args = ap.parse_args()
    prompt = next(json.loads(line)["prompt"] for line in open(HERE / "more_prompts.jsonl")
                  if json.loads(line)["name"] == "x-config")
    spent = [0.0]
    for name in ("__call__", "allows", "allowed_prefix"):
        setattr(C.ConstraintMask, name, timed(getattr(C.ConstraintMask, name), spent))
    cases = {f"{mode} {label}": (mode, con) for mode in ("off", "ngram")
             for label, con in (("free", None), ("json_object", Constraint("json_object")),
                                ("schema", Constraint("json_schema", json.dumps(SCHEMA))))}
    rates: dict[str, list[float]] = {k: [] for k in cases}
    per_token: dict[str, list[float]] = {k: [] for k in cases}
    accept: dict[str, list[float]] = {k: [] for k in cases}
    with Engine(args.model, EngineConfig(n_ctx=2048)) as engine:
        for r in range(args.rounds + 1):  # round 0 warms up
            for key, (mode, con) in cases.items():
                spent[0] = 0.0
                res = engine.generate(Request(messages=[Message("user", prompt)], max_tokens=args.max_tokens,
                                              sampling=SamplingParams(temperature=0.0), spec=mode, constraint=con))
                if r == 0:
                    continue
                rates[key].append(res.timings.decode_tokens_per_s)
                per_token[key].append(spent[0] / max(1, res.usage.completion_tokens) * 1e3)
                accept[key].append(res.spec.acceptance_rate if res.spec else 0.0)
    print(f"{'case':<18} {'tok/s median':>12} {'spread':>14} {'vs free':>8} {'grammar ms/tok':>15} {'acceptance':>10}")
    for key in cases:
        mode = key.split()[0]
        med, base = statistics.median(rates[key]), statistics.median(rates[f"{mode} free"])
        print(f"{key:<18} {med:12.2f} {min(rates[key]):6.2f}-{max(rates[key]):<7.2f} {med / base:8.3f} "
              f"{statistics.median(per_token[key]):15.3f} {statistics.median(accept[key]):10.2f}")


if __name__ == "__main__":
    main()
