"""What localspec does on this machine's accelerator (or CPU), measured in one run on
random-weight models in real shapes: the device and plan, the decode costs by batch size
and the draft step through localspec's own calibration, plain decoding against
llama-bench on the same file, and the speedups speculation would give on the recorded
Qwen2.5-Coder outputs with these costs. Run by scripts/gpu-check.sh (which builds and
installs first on a GPU machine); everything printed also goes to OUT/.

    python scripts/gpu_check.py --mode gpu|cpu|quick --out DIR [--llama-bench BIN] [--tokenizer FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import localspec.engine  # noqa: E402,F401  (first: llama.cpp's libraries before numpy's, see engine/backend.py)
import random_gguf  # noqa: E402

# (target shape, draft shape, tokens decoded per measurement, GPU layers)
MODES = {
    "gpu": ("qwen2.5-coder-7b", "qwen2.5-coder-0.5b", 128, 999),
    "cpu": ("qwen2.5-coder-0.5b", "smollm2-135m", 64, 0),
    "quick": ("tiny", "tiny", 16, 0),
}
RECORDED = ROOT / "tests" / "unit" / "data" / "qwen2.5-coder-1.5b-greedy.json"
AGENT = ROOT / "tests" / "unit" / "data" / "qwen2.5-coder-1.5b-agent-greedy.json"
MATCHES = ROOT / "tests" / "unit" / "data" / "qwen2.5-coder-0.5b-draft-matches.json"
REPEATS = 3


class Report:
    """Prints and keeps every line (report.txt), and the figures (figures.json)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.lines: list[str] = []
        self.figures: dict = {}

    def say(self, text: str = "") -> None:
        print(text, flush=True)
        self.lines.append(text)
        (self.out / "report.txt").write_text("\n".join(self.lines) + "\n")

    def save(self) -> None:
        (self.out / "figures.json").write_text(json.dumps(self.figures, indent=1))


def run_cli(report: Report, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "localspec", *args], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    text = (proc.stdout + proc.stderr).strip()
    report.say(f"$ localspec {' '.join(args)}   (exit {proc.returncode})")
    for line in text.splitlines():
        report.say("  " + line)
    return text


def models(mode: str, tokenizer: Path, work: Path, report: Report) -> tuple[Path, Path]:
    target_shape, draft_shape, _, _ = MODES[mode]
    tok = random_gguf.load_tokenizer(tokenizer)
    t0 = time.perf_counter()
    target = random_gguf.write(random_gguf.SHAPES[target_shape], tok, work / f"{target_shape}-random.gguf",
                               target_shape, seed=0)
    draft = random_gguf.write(random_gguf.SHAPES[draft_shape], tok, work / f"{draft_shape}-draft-random.gguf",
                              draft_shape, seed=1)
    report.say(f"models: {target.name} ({target.stat().st_size / 2**30:.2f} GiB), {draft.name} "
               f"({draft.stat().st_size / 2**30:.2f} GiB), Q4_K (Q8_0 where a row is not a multiple of 256), "
               f"random weights, written in {time.perf_counter() - t0:.0f} s")
    report.figures["models"] = {"target": target_shape, "draft": draft_shape, "quant": "Q4_K/Q8_0 random",
                                "target_bytes": target.stat().st_size, "draft_bytes": draft.stat().st_size}
    return target, draft


def calibrate(target: Path, draft: Path, gpu_layers: int, n_tokens: int, report: Report) -> dict:
    """The engine's own calibration (costs by batch size, the draft step), then plain
    decoding through the engine, REPEATS times."""
    import numpy as np

    from localspec.engine import Engine, EngineConfig
    from localspec.types import Request, SamplingParams, SpecConfig

    os.environ["LOCALSPEC_NO_COST_CACHE"] = "1"  # measure now, do not remember
    config = EngineConfig(n_ctx=4096, n_slots=1, n_gpu_layers=gpu_layers, draft_model=draft,
                          draft_gpu_layers=gpu_layers, spec=SpecConfig(mode="auto"))
    t0 = time.perf_counter()
    with Engine(target, config) as engine:
        prompt = json.loads(RECORDED.read_text())["code-edit-1"]["prompt"]
        eog = {int(t): -100.0 for t in np.flatnonzero(engine.model._eog)}  # decode n_tokens, whatever the weights say
        greedy = SamplingParams(temperature=0.0, logit_bias=eog)
        engine.generate(Request(prompt_tokens=prompt[:32], max_tokens=4, sampling=greedy, spec="off"))  # warm-up
        costs = engine.costs
        table = costs.snapshot()
        rates = []
        for _ in range(REPEATS):
            result = engine.generate(Request(prompt_tokens=prompt, max_tokens=n_tokens, sampling=greedy, spec="off",
                                             cache_prompt=False))
            rates.append(result.timings.decode_tokens_per_s)
        load_s = engine.load_s
    report.say(f"engine: loaded in {load_s:.1f} s, calibrated and measured in {time.perf_counter() - t0 - load_s:.1f} s")
    t1 = table[1]
    report.say("")
    report.say("| batch rows | ms | x T(1) |")
    report.say("|---|---|---|")
    for b, seconds in table.items():
        report.say(f"| {b} | {seconds * 1e3:.2f} | {seconds / t1:.2f} |")
    report.say(f"| draft step | {costs.draft_step * 1e3:.2f} | {costs.draft_step / t1:.3f} |")
    (report.out / "costs.md").write_text("\n".join(line for line in report.lines if line.startswith("|")) + "\n")
    report.say("")
    med = statistics.median(rates)
    report.say(f"plain decoding through localspec: {med:.1f} tok/s (median of {REPEATS}: "
               f"{', '.join(f'{r:.1f}' for r in rates)}), {n_tokens} tokens after a {len(prompt)}-token prompt")
    figures = {"costs_ms": {str(b): round(s * 1e3, 3) for b, s in table.items()},
               "draft_step_ms": round(costs.draft_step * 1e3, 3), "draft_to_target": round(costs.draft_step / t1, 4),
               "localspec_plain_tok_s": {"median": round(med, 2), "runs": [round(r, 2) for r in rates]}}
    report.figures.update(figures)
    return {b: s for b, s in table.items()} | {"draft_step": costs.draft_step}


def llama_bench(binary: str | None, target: Path, gpu_layers: int, n_tokens: int, report: Report) -> None:
    if not binary or not Path(binary).exists():
        report.say(f"llama-bench: not run ({binary or 'no binary given'}): the plain decode rate above has no anchor")
        report.figures["llama_bench"] = None
        return
    from localspec.engine.backend import default_threads

    cmd = [binary, "-m", str(target), "-p", "0", "-n", str(n_tokens), "-r", str(REPEATS), "-ngl", str(gpu_layers),
           "-t", str(default_threads()), "-o", "json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    try:
        row = json.loads(proc.stdout)[0]
        report.say(f"llama-bench on the same file: {row['avg_ts']:.1f} tok/s (stddev {row['stddev_ts']:.1f}, "
                   f"{REPEATS} runs of {n_tokens} tokens, -ngl {gpu_layers}); backend {row.get('backends', '?')}, "
                   f"{row.get('gpu_info') or row.get('cpu_info', '')}")
        report.figures["llama_bench"] = {"avg_tok_s": row["avg_ts"], "stddev": row["stddev_ts"],
                                         "runs": row.get("samples_ts")}
    except (ValueError, IndexError, KeyError):
        report.say(f"llama-bench failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
        report.figures["llama_bench"] = {"error": proc.stderr.strip()[-500:]}


def replayed(table: dict, tokenizer_model: Path, report: Report) -> None:
    """The recorded greedy outputs of Qwen2.5-Coder-1.5B (the bench's prompts and the
    agent prompts) replayed with these costs: n-gram speculation by the engine's own
    policy (reading the prompts' diffs with Qwen's tokenizer, from ``tokenizer_model``),
    llama.cpp's ngram-simple and ngram-mod rules, the oracle, and Qwen2.5-Coder-0.5B
    drafting, from where its greedy choice matched (bench prompts only)."""
    from localspec.bench.replay import draft_model, fixed_rule, mod_rule, oracle, replay
    from localspec.engine import backend

    draft_step = table.pop("draft_step")
    recorded = json.loads(RECORDED.read_text()) | json.loads(AGENT.read_text())
    matches = json.loads(MATCHES.read_text())["matches"]
    tokenizer = backend.Model(tokenizer_model)
    report.say("")
    report.say("Predicted speedups over plain decoding, these costs, the recorded outputs "
               "(acceptance from the recording):")
    report.say("| prompt | tokens | n-gram (localspec) | ngram-simple rule | ngram-mod rule | n-gram oracle | "
               "draft model: best k | draft acceptance |")
    report.say("|---|---|---|---|---|---|---|---|")
    rows = {}
    for name, d in recorded.items():
        ngram = replay(d["prompt"], d["truth"], table, tokenizer=tokenizer).speedup
        rule = fixed_rule(d["prompt"], d["truth"], table)
        mod = mod_rule(d["prompt"], d["truth"], table)
        best = oracle(d["prompt"], d["truth"], table)
        row = {"ngram": round(ngram, 3), "ngram_simple": round(rule, 3), "ngram_mod": round(mod, 3),
               "ngram_oracle": round(best, 3)}
        bits = matches.get(name)
        if bits:
            by_k = {0: 1.0} | {k: draft_model(d["truth"], bits, table, draft_step, k) for k in range(1, 17)}
            k = max(by_k, key=by_k.get)  # k 0: drafting does not pay here
            rate = bits.count("1") / len(bits)
            drafted = f"{by_k[k]:.2f}x (k {k}) | {rate:.2f}"
            row |= {"draft_best": round(by_k[k], 3), "draft_k": k, "draft_match_rate": round(rate, 3)}
        else:
            drafted = "- | -"
        report.say(f"| {name} | {len(d['truth'])} | {ngram:.2f}x | {rule:.2f}x | {mod:.2f}x | {best:.2f}x | {drafted} |")
        rows[name] = row
    tokenizer.close()
    report.figures["predicted"] = rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=MODES, default="gpu")
    ap.add_argument("--out", default="gpu-check-out")
    ap.add_argument("--work", help="where the models are written (default: OUT/../gpu-check-models)")
    ap.add_argument("--llama-bench", help="llama-bench built from the vendored llama.cpp")
    ap.add_argument("--tokenizer", help="Qwen's tokenizer: the bundle's JSON, or a Qwen GGUF")
    a = ap.parse_args()
    out = Path(a.out)
    report = Report(out)
    work = Path(a.work) if a.work else out.parent / "gpu-check-models"
    work.mkdir(parents=True, exist_ok=True)
    tokenizer = Path(a.tokenizer) if a.tokenizer else _default_tokenizer()
    t0 = time.perf_counter()
    target_shape, draft_shape, n_tokens, gpu_layers = MODES[a.mode]
    report.say(f"localspec GPU check, mode {a.mode}: target {target_shape}, draft {draft_shape}")
    report.figures["mode"] = a.mode
    run_cli(report, "doctor")
    target, draft = models(a.mode, tokenizer, work, report)
    plan = run_cli(report, "plan", str(target), "--draft", str(draft), "--ctx-size", "4096", "--slots", "1",
                   "--offline")
    report.figures["plan"] = [" ".join(re.sub(r"[│┃]", " ", line).split()) for line in plan.splitlines()
                              if "target:" in line or "draft:" in line]  # the rows: layers on GPU, bytes
    table = calibrate(target, draft, gpu_layers, n_tokens, report)
    llama_bench(a.llama_bench, target, gpu_layers, n_tokens, report)
    replayed(table, draft, report)
    report.say(f"\ndone in {time.perf_counter() - t0:.0f} s; {out}/: report.txt, figures.json, costs.md")
    report.figures["seconds"] = round(time.perf_counter() - t0, 1)
    report.save()


def _default_tokenizer() -> Path:
    bundled = ROOT / ".gpu-bundle" / "qwen-tokenizer.json.gz"
    if bundled.exists():
        return bundled
    from localspec.testmodels import fetch

    return fetch("qwen-0.5b")


if __name__ == "__main__":
    main()
