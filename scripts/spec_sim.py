"""Replay n-gram speculation offline: how the engine's choice of draft length would do on
known greedy outputs and a table of decode costs, against an oracle that knows the output.

    python scripts/spec_sim.py record MODEL.gguf OUT.json [--max-tokens 256] [--prompts FILE]
    python scripts/spec_sim.py replay OUT.json [--costs 'T1,T2,...' | --costs-json costs.json]

``record`` decodes the bench prompts (or your JSON Lines prompts) plainly and keeps the
prompt and output tokens. ``replay`` runs the engine's own Speculator over them with the
target replaced by the recorded output (verification keeps the drafts' common prefix with
it, as greedy decoding does) and each step charged what a batch of its size costs, so a
change to the policy is judged in seconds on many machines' cost shapes instead of in
minutes of noisy benchmarking. The oracle drafts, at each step, exactly as far as the
proposal will be kept when that is cheaper: no policy can beat it, so it shows what is
left to win on a given machine. Costs: ``1:36,2:57,4:90,16:196,64:606`` (ms by batch
size; an unlisted size costs what the next listed one does, as kernels work in tiles), or
a ``costs.json`` the engine wrote (its first entry).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace

from localspec.engine.speculate import Costs, NgramIndex, SpecConfig
from localspec.engine.speculator import Speculator


def cost_of(table: dict[int, float], b: int) -> float:
    for size in sorted(table):
        if size >= b:
            return table[size]
    last = max(table)
    return table[last] * b / last


def replay(prompt: list[int], truth: list[int], table: dict[int, float], draft_max: int) -> tuple[float, list]:
    """The speedup over plain decoding, and the (drafted, kept) of each drafting step."""
    costs = Costs()
    for b in table:
        costs.set_target(b, table[b])
    speculator = Speculator(SpecConfig(mode="ngram", draft_max=draft_max), None, n_ctx=1 << 20, costs=costs)
    _, spec = speculator.start(prompt, "ngram")
    slot = SimpleNamespace(seq=0, spec=spec, mode="ngram", tokens=list(prompt), generated=1,
                           job=SimpleNamespace(request=SimpleNamespace(max_tokens=len(truth))))
    spec.emitted(truth[0])  # the first token comes from the prefill
    done, elapsed, steps = 1, 0.0, []
    while done < len(truth):
        plan = speculator.plan([slot]).get(0)
        drafts = plan.tokens if plan else []
        kept = 0
        while kept < len(drafts) and done + kept < len(truth) and drafts[kept] == truth[done + kept]:
            kept += 1
        seconds = cost_of(table, len(drafts) + 1)
        elapsed += seconds
        costs.observe_target(len(drafts) + 1, seconds)
        speculator.record(spec, plan.kind if plan else "none", len(drafts), kept)
        if drafts:
            steps.append((len(drafts), kept))
        for token in truth[done : done + kept + 1]:
            spec.emitted(token)
        slot.tokens.extend(truth[done - 1 : done + kept])
        done += kept + 1
        slot.generated = done
    return (len(truth) - 1) * cost_of(table, 1) / elapsed, steps


def oracle(prompt: list[int], truth: list[int], table: dict[int, float], draft_max: int) -> float:
    """The best speedup any choice of draft lengths could reach with these proposals."""
    index = NgramIndex(prompt, 1, 4)
    index.extend(truth[:1])
    keepable = [0] * len(truth)
    for i in range(1, len(truth)):
        _, proposal, start = index.propose(draft_max)
        while keepable[i] < len(proposal) and i + keepable[i] < len(truth) and proposal[keepable[i]] == truth[i + keepable[i]]:
            keepable[i] += 1
        index.accepted(start, min(1, keepable[i]))
        index.extend([truth[i]])
    n = len(truth)
    best = [0.0] * (n + 1)  # best[i]: the least time to produce truth[i:]
    for i in range(n - 1, 0, -1):
        best[i] = min(cost_of(table, k + 1) + best[min(n, i + k + 1)] for k in range(keepable[i] + 1))
    return (n - 1) * cost_of(table, 1) / best[1]


def record(model: str, out: str, max_tokens: int, prompts: str | None) -> None:
    from localspec.bench import SUITE, load_prompts
    from localspec.engine import Engine
    from localspec.types import Message, Request, SamplingParams

    suite = load_prompts(Path(prompts)) if prompts else SUITE
    data = {}
    with Engine(model) as engine:
        for p in suite:
            request = Request(messages=[Message("user", p.prompt)], sampling=SamplingParams(temperature=0.0),
                              max_tokens=max_tokens, spec="off", cache_prompt=False)
            tokens, _ = engine.prepare(request)
            output = [e.token_id for e in engine.submit(request) if e.token_id >= 0]
            data[p.name] = {"prompt": tokens, "truth": output}
            print(f"{p.name}: {len(tokens)} prompt tokens, {len(output)} generated", flush=True)
    Path(out).write_text(json.dumps(data))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("model")
    rec.add_argument("out")
    rec.add_argument("--max-tokens", type=int, default=256)
    rec.add_argument("--prompts")
    rep = sub.add_parser("replay")
    rep.add_argument("recorded")
    rep.add_argument("--costs", default="1:34,2:57,3:75,4:90,8:155,12:203,16:196,24:318,32:368,48:473,64:606",
                     help="ms by batch size (default: a 2-core EPYC, Qwen2.5-Coder-1.5B Q4_K_M)")
    rep.add_argument("--costs-json", help="a costs.json written by the engine")
    rep.add_argument("--draft-max", type=int, default=64)
    args = ap.parse_args()
    if args.command == "record":
        record(args.model, args.out, args.max_tokens, args.prompts)
        return
    if args.costs_json:
        entry = next(iter(json.loads(Path(args.costs_json).read_text()).values()))
        table = {int(b): float(t) for b, t in entry["target"].items()}
    else:
        table = {int(b): float(t) / 1000 for b, t in (pair.split(":") for pair in args.costs.split(","))}
    for name, d in json.loads(Path(args.recorded).read_text()).items():
        ratio, steps = replay(d["prompt"], d["truth"], table, args.draft_max)
        best = oracle(d["prompt"], d["truth"], table, args.draft_max)
        print(f"{name:16s} {ratio:5.2f}x  oracle {best:5.2f}x  drafts (k, kept): {steps}")


if __name__ == "__main__":
    main()
