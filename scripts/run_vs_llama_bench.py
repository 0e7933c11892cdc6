"""One request's plain decode speed: ``localspec run`` against llama.cpp's ``llama-bench
-tg`` on the same file and threads, alternating, in one run.

    python scripts/run_vs_llama_bench.py MODEL.gguf --llama-bench BIN_DIR [--rounds 5]
        [--tokens 256] [--threads 2] [--prompt TEXT]

Each round runs llama-bench once (``-p 0 -n TOKENS -r 1``: its decode of TOKENS tokens
from an empty context, no sampling) and ``localspec run --spec off -n TOKENS --json``
twice: greedy, and with run's default sampling (what a user gets with no flags), with a
prompt whose answer runs past TOKENS tokens. localspec's rate is its own decode timing
(first token to last). The ratio of each round is taken to that round's llama-bench; the
median and the spread over rounds are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

PROMPT = "Write a long story about a dragon and a knight, in many chapters."


def llama_bench(bin_dir: str, model: str, tokens: int, threads: int) -> float:
    out = subprocess.run([os.path.join(bin_dir, "llama-bench"), "-m", model, "-p", "0", "-n", str(tokens), "-r", "1",
                          "-t", str(threads), "-o", "json"], capture_output=True, text=True, check=True,
                         env={**os.environ, "LD_LIBRARY_PATH": bin_dir})
    return float(json.loads(out.stdout)[0]["avg_ts"])


def localspec_run(model: str, tokens: int, threads: int, greedy: bool, prompt: str = PROMPT) -> float:
    argv = [sys.executable, "-m", "localspec", "run", model, "--spec", "off", "-n", str(tokens), "--json",
            "--threads", str(threads), "--no-prompt-cache"] + (["--temperature", "0"] if greedy else [])
    out = subprocess.run(argv, input=prompt, capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    if got["usage"]["completion_tokens"] < tokens:
        raise SystemExit(f"the answer ended after {got['usage']['completion_tokens']} tokens; ask for a longer one "
                         "(--prompt)")
    return float(got["timings"]["decode_tokens_per_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--llama-bench", metavar="BIN_DIR", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--prompt", default=PROMPT, help="one whose answer runs past --tokens, greedy and sampled")
    args = ap.parse_args()
    rows: dict[str, list[float]] = {"llama-bench": [], "run greedy": [], "run default sampling": []}
    for r in range(args.rounds):
        rows["llama-bench"].append(llama_bench(args.llama_bench, args.model, args.tokens, args.threads))
        rows["run greedy"].append(localspec_run(args.model, args.tokens, args.threads, True, args.prompt))
        rows["run default sampling"].append(localspec_run(args.model, args.tokens, args.threads, False, args.prompt))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in rows.items()), file=sys.stderr, flush=True)
    anchor = rows["llama-bench"]
    print(f"{os.path.basename(args.model)}, {args.tokens} tokens, {args.threads} threads, {args.rounds} rounds: "
          "tok/s median (min-max); ratio to llama-bench in the same round")
    for name, values in rows.items():
        ratios = [v / a for v, a in zip(values, anchor)]
        print(f"  {name:22s} {statistics.median(values):7.1f} ({min(values):.1f}-{max(values):.1f})   "
              f"x{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
