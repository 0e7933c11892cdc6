"""Replay n-gram speculation offline: how the engine's choice of draft length would do on
known greedy outputs and a table of decode costs, against an oracle that knows the output.

    python scripts/spec_sim.py record MODEL.gguf OUT.json [--max-tokens 256] [--prompts FILE]
    python scripts/spec_sim.py replay OUT.json [--costs 'T1,T2,...' | --costs-json costs.json]
    python scripts/spec_sim.py matches DRAFT.gguf OUT.json MATCHES.json

``record`` decodes the bench prompts (or your JSON Lines prompts) plainly and keeps the
prompt and output tokens. ``replay`` runs the engine's own speculation policy over them
(``localspec.bench.replay``: the target replaced by the recorded output, each step
charged what a batch of its size costs) and the oracle, which drafts at each step exactly
as far as will be kept when that is cheaper: no policy can beat it, so it shows what is
left to win on a given machine; and llama.cpp's ngram-simple rule (a 12-token match
drafts up to 48 tokens) replayed alike. Costs: ``1:36,2:57,4:90,16:196,64:606`` (ms by batch
size; an unlisted size costs what the next listed one does, as kernels work in tiles), or
a ``costs.json`` the engine wrote (its first entry).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from localspec.bench.replay import fixed_rule, mod_rule, oracle, replay


def record(model: str, out: str, max_tokens: int, prompts: str | None) -> None:
    from localspec.bench.runner import _generate
    from localspec.bench.suite import builtin_suite, load_prompts
    from localspec.engine import Engine
    from localspec.types import Message, Request, SpecConfig

    suite = load_prompts(Path(prompts)) if prompts else builtin_suite()
    data = {}
    with Engine(model) as engine:
        for p in suite:  # decoded as the bench decodes its plain runs
            tokens, _ = engine.prepare(Request(messages=[Message("user", p.prompt)]))
            output, _ = _generate(engine, p, max_tokens, SpecConfig(mode="off"))
            data[p.name] = {"prompt": tokens, "truth": output}
            print(f"{p.name}: {len(tokens)} prompt tokens, {len(output)} generated", flush=True)
    Path(out).write_text(json.dumps(data))


def matches(draft: str, recorded: str, out: str) -> None:
    """Where a draft model's greedy choice is the recorded output's next token: given the
    true prefix its drafts follow the output while they match, so a greedy draft of k
    from position i keeps the run of matches from i (at most k). One pass of the draft
    over each prompt and output gives every position's bit."""
    from localspec.engine import backend

    model = backend.Model(draft)
    data = {}
    for name, d in json.loads(Path(recorded).read_text()).items():
        tokens, n_prompt = d["prompt"] + d["truth"], len(d["prompt"])
        ctx, batch = backend.Context(model, n_ctx=len(tokens) + 8, n_batch=512), backend.Batch(512)
        bits = []
        for start in range(0, len(tokens) - 1, 512):
            batch.clear()
            rows = []
            for pos in range(start, min(start + 512, len(tokens) - 1)):
                want = pos >= n_prompt - 1
                row = batch.add(tokens[pos], pos, 0, want)
                if want:
                    rows.append((row, tokens[pos + 1]))
            ctx.decode(batch)
            bits += ["1" if int(ctx.logits(row).argmax()) == nxt else "0" for row, nxt in rows]
        ctx.close()
        batch.close()
        data[name] = "".join(bits)
        print(f"{name}: {bits.count('1')}/{len(bits)} positions the draft predicts", flush=True)
    model.close()
    Path(out).write_text(json.dumps({"draft": Path(draft).name, "matches": data}, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("model")
    rec.add_argument("out")
    rec.add_argument("--max-tokens", type=int, default=256)
    rec.add_argument("--prompts")
    mat = sub.add_parser("matches")
    mat.add_argument("draft")
    mat.add_argument("recorded")
    mat.add_argument("out")
    rep = sub.add_parser("replay")
    rep.add_argument("recorded")
    rep.add_argument("--costs", default="1:34,2:57,3:75,4:90,8:155,12:203,16:196,24:318,32:368,48:473,64:606",
                     help="ms by batch size (default: a 2-core EPYC, Qwen2.5-Coder-1.5B Q4_K_M)")
    rep.add_argument("--costs-json", help="a costs.json written by the engine")
    rep.add_argument("--draft-max", type=int, default=64)
    rep.add_argument("--steps", action="store_true", help="list every draft (k, kept)")
    args = ap.parse_args()
    if args.command == "record":
        record(args.model, args.out, args.max_tokens, args.prompts)
        return
    if args.command == "matches":
        matches(args.draft, args.recorded, args.out)
        return
    if args.costs_json:
        entry = next(iter(json.loads(Path(args.costs_json).read_text()).values()))
        table = {int(b): float(t) for b, t in entry["target"].items()}
    else:
        table = {int(b): float(t) / 1000 for b, t in (pair.split(":") for pair in args.costs.split(","))}
    for name, d in json.loads(Path(args.recorded).read_text()).items():
        result = replay(d["prompt"], d["truth"], table, args.draft_max)
        best = oracle(d["prompt"], d["truth"], table, args.draft_max)
        rule = fixed_rule(d["prompt"], d["truth"], table)
        mod = mod_rule(d["prompt"], d["truth"], table)
        print(f"{name:16s} {result.speedup:5.2f}x  llama.cpp ngram-simple {rule:5.2f}x  ngram-mod {mod:5.2f}x  "
              f"oracle {best:5.2f}x  drafts (k, kept): {result.steps if args.steps else len(result.steps)}")


if __name__ == "__main__":
    main()
