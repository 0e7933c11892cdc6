"""Load on an OpenAI-compatible server: aggregate and per-request decode tokens/s at
several concurrencies, with speculation off and on, against localspec serve and any
other server (llama-server) on the same prompts, in one run.

    python scripts/serve_load.py MODEL.gguf [--slots 4] [--clients 1,2,4,8] [--max-tokens 192]
        [--url http://127.0.0.1:8081/v1 --url-name llama-server-np4 ...] [--json out.json]

It starts ``localspec serve MODEL`` twice (``--spec off`` and the default ``auto``) on free
loopback ports, or measures only the given ``--url``s with ``--no-localspec``. Each
client streams greedy completions of a mix of code-edit and code-generation prompts (the
bench suite's), one after another; per request, decode tokens/s is (tokens - 1) over the
time from its first streamed token to its last, and the aggregate is every token over
the wall time of the level. Speed is compared within one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from localspec.bench.suite import builtin_suite

PROMPT_KINDS = ("code-editing", "code-rewrite", "code-generation")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(model: str, slots: int, spec: str, ctx: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "localspec", "serve", model, "--port", str(port), "--slots",
                             str(slots), "--spec", spec, "--ctx-size", str(ctx), "--alias", "m"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"localspec serve failed: {proc.stderr.read()}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url + "/v1"
        except OSError:
            time.sleep(0.2)
    raise SystemExit("localspec serve did not become ready")


def one(url: str, prompt: str, max_tokens: int) -> tuple[int, float, float, int, int]:
    """Stream one greedy chat completion: (tokens, seconds first->last token, total
    seconds, tokens drafted, drafts accepted (localspec's extension; 0 elsewhere))."""
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                       "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(url + "/chat/completions", body, {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first = last = None
    n = drafted = accepted = 0
    with urllib.request.urlopen(req, timeout=600) as resp:
        for line in resp:
            if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            choices = chunk.get("choices") or []
            if choices and choices[0].get("delta", {}).get("content"):
                now = time.perf_counter()
                first = first or now
                last = now
            if chunk.get("usage"):
                n = chunk["usage"]["completion_tokens"]
                spec = chunk.get("speculative") or {}
                drafted, accepted = spec.get("drafted", 0), spec.get("accepted", 0)
    return n, (last - first) if first and last else 0.0, time.perf_counter() - t0, drafted, accepted


def level(url: str, prompts: list[str], clients: int, max_tokens: int, per_client: int) -> dict:
    results: list[tuple[int, float, float, int, int]] = []
    lock = threading.Lock()

    def client(c: int) -> None:
        for k in range(per_client):
            got = one(url, prompts[(c + k * clients) % len(prompts)], max_tokens)
            with lock:
                results.append(got)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    wall = time.perf_counter() - t0
    rates = [(r[0] - 1) / r[1] for r in results if r[0] > 1 and r[1] > 0]
    tokens = sum(r[0] for r in results)
    return {"clients": clients, "requests": len(results), "tokens": tokens,
            "drafted": sum(r[3] for r in results), "accepted": sum(r[4] for r in results),
            "aggregate_tokens_per_s": round(tokens / wall, 2),
            "per_request_median": round(statistics.median(rates), 2) if rates else 0.0,
            "per_request_min": round(min(rates), 2) if rates else 0.0, "wall_s": round(wall, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--clients", default="1,2,4,8")
    ap.add_argument("--max-tokens", type=int, default=192)
    ap.add_argument("--per-client", type=int, default=2, help="requests each client sends per level")
    ap.add_argument("--ctx-size", type=int, default=4096)
    ap.add_argument("--url", action="append", default=[], help="another OpenAI-compatible base URL (…/v1)")
    ap.add_argument("--url-name", action="append", default=[])
    ap.add_argument("--modes", default="off,auto", help="localspec --spec modes to run, in order (repeats allowed)")
    ap.add_argument("--no-localspec", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    # code edits (answers that copy their input) and code generation, alternating
    suite = [p for p in builtin_suite() if p.kind in PROMPT_KINDS]
    edits, others = [p for p in suite if p.kind != "code-generation"], [p for p in suite if p.kind == "code-generation"]
    prompts = [p.prompt for pair in zip(edits, others) for p in pair] + [p.prompt for p in edits[len(others):]]
    levels = [int(c) for c in args.clients.split(",")]
    targets: list[tuple[str, str, subprocess.Popen | None]] = []
    for i, url in enumerate(args.url):
        targets.append((args.url_name[i] if i < len(args.url_name) else url, url, None))
    report = {}
    modes = [] if args.no_localspec else args.modes.split(",")
    for run, mode in enumerate(modes):
        proc, url = start(args.model, args.slots, mode, args.ctx_size)
        try:
            name = f"localspec spec={mode}" + (f" #{modes[:run + 1].count(mode)}" if modes.count(mode) > 1 else "")
            report[name] = run_levels(url, prompts, levels, args)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    for name, url, _ in targets:
        report[name] = run_levels(url, prompts, levels, args)
    print(f"{'server':34s} {'clients':>7s} {'aggregate':>10s} {'per-req med':>12s} {'per-req min':>12s} "
          f"{'drafted':>8s} {'accepted':>8s}")
    for name, rows in report.items():
        for r in rows:
            print(f"{name:34s} {r['clients']:7d} {r['aggregate_tokens_per_s']:10.2f} {r['per_request_median']:12.2f} "
                  f"{r['per_request_min']:12.2f} {r['drafted']:8d} {r['accepted']:8d}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": os.path.basename(args.model), "slots": args.slots, "max_tokens": args.max_tokens,
                       "results": report}, f, indent=1)


def run_levels(url: str, prompts: list[str], levels: list[int], args) -> list[dict]:
    one(url, "Say hello.", 8)  # warm-up
    out = []
    for clients in levels:
        row = level(url, prompts, clients, args.max_tokens, args.per_client)
        print(f"  {url} clients={clients}: {row}", file=sys.stderr, flush=True)
        out.append(row)
    return out


if __name__ == "__main__":
    main()
