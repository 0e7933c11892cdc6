"""Load on OpenAI-compatible servers: localspec serve against llama.cpp's llama-server,
started side by side and measured in interleaved rounds on the same prompts.

    python scripts/serve_load.py MODEL.gguf --llama-server BIN_DIR [--slots 4]
        [--clients 1,2,4,8] [--rounds 3] [--max-tokens 128] [--arrival] [--profile 4]
        [--json out.json]

Servers: ``localspec serve`` with ``--spec off`` and with its default speculation, and
(given ``--llama-server``) ``llama-server -np SLOTS`` plain and with its n-gram
speculation (``--spec-type ngram-mod``), all with the same model file, threads, context
per slot and prompt caching (on, each server's default). Each client streams greedy
chat completions of code edits (answers that copy their input) and code generation,
alternating, one after another. Per request, decode tokens/s is (tokens - 1) over the
time from its first streamed token to its last; a level's aggregate is every token
over its wall time. Round r runs every level on every server, the servers' order
rotated each round, so a drift of the machine's speed falls on all of them alike; the
table gives the median over rounds and the spread (min-max).

``--arrival``: while ``slots - 1`` clients generate, a ~2,000-token prompt arrives; its
time to first token, and the generating requests' tokens/s before it arrived and
while it was prefilled, per server.

``--profile N``: one more level of N clients on each localspec server under py-spy
(``pip install py-spy``), and where the engine thread's and the event loop's wall time
went (llama_decode, sampling and verification, drafting, scheduling, text, stream
hand-off, HTTP/SSE).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from localspec.bench.suite import builtin_suite

PROMPT_KINDS = ("code-editing", "code-rewrite", "code-generation")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    localspec: bool = False
    proc: subprocess.Popen | None = None
    url: str = ""
    log: str = ""

    def start(self, logdir: str) -> None:
        port = free_port()
        self.log = os.path.join(logdir, re.sub(r"\W+", "-", self.name) + ".log")
        out = open(self.log, "w")  # a file, not a pipe: a full pipe blocks the server
        self.proc = subprocess.Popen([*self.argv, "--port", str(port)], stdout=out, stderr=subprocess.STDOUT,
                                     env={**os.environ, **self.env})
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"{self.name} exited at start; see {self.log}")
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as r:
                    if r.status == 200:
                        self.url = base + "/v1"
                        return
            except OSError:
                time.sleep(0.3)
        raise SystemExit(f"{self.name} did not become ready; see {self.log}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@dataclass
class Answer:
    prompt: int  # index into the prompt list
    tokens: int
    t_sent: float
    stamps: list[float]  # when each content chunk arrived
    drafted: int = 0
    accepted: int = 0

    @property
    def rate(self) -> float:
        """Decode tokens/s: (tokens - 1) from the first chunk to the last."""
        span = self.stamps[-1] - self.stamps[0] if len(self.stamps) > 1 else 0.0
        return (self.tokens - 1) / span if self.tokens > 1 and span > 0 else 0.0

    @property
    def ttft(self) -> float:
        return self.stamps[0] - self.t_sent if self.stamps else 0.0


def ask(url: str, prompt: str, max_tokens: int, index: int = -1, on_first=None) -> Answer:
    """Stream one greedy chat completion (``on_first()`` at its first token)."""
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                       "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(url + "/chat/completions", body, {"Content-Type": "application/json"})
    answer = Answer(index, 0, time.perf_counter(), [])
    with urllib.request.urlopen(req, timeout=900) as resp:
        for line in resp:
            if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            choices = chunk.get("choices") or []
            if choices and choices[0].get("delta", {}).get("content"):
                answer.stamps.append(time.perf_counter())
                if on_first is not None and len(answer.stamps) == 1:
                    on_first()
            if chunk.get("usage"):
                answer.tokens = chunk["usage"]["completion_tokens"]
                spec = chunk.get("speculative") or {}
                answer.drafted, answer.accepted = spec.get("drafted", 0), spec.get("accepted", 0)
    return answer


def level(url: str, prompts: list[str], clients: int, max_tokens: int, per_client: int) -> dict:
    """``clients`` clients, each sending ``per_client`` requests one after another."""
    answers: list[Answer] = []
    lock = threading.Lock()

    def client(c: int) -> None:
        for k in range(per_client):
            i = (c + k * clients) % len(prompts)
            got = ask(url, prompts[i], max_tokens, i)
            with lock:
                answers.append(got)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    wall = time.perf_counter() - t0
    tokens = sum(a.tokens for a in answers)
    return {"aggregate": tokens / wall, "wall_s": wall, "tokens": tokens,
            "rates": {a.prompt: a.rate for a in answers},  # a prompt's rate (the last if sent twice)
            "per_request_median": statistics.median(a.rate for a in answers),
            "drafted": sum(a.drafted for a in answers), "accepted": sum(a.accepted for a in answers)}


def arrival(url: str, prompts: list[str], long_prompt: str, generating: int, max_tokens: int) -> dict:
    """``generating`` requests decode; 2 s after the last of them began, a long prompt arrives."""
    answers: list[Answer] = []
    sent = {}
    started = threading.Semaphore(0)

    def gen(c: int) -> None:
        answers.append(ask(url, prompts[c % len(prompts)], max_tokens, c, started.release))

    def late() -> None:
        for _ in range(generating):
            started.acquire()
        time.sleep(2.0)
        sent["answer"] = ask(url, long_prompt, 16)

    with ThreadPoolExecutor(generating + 1) as pool:
        futures = [pool.submit(gen, c) for c in range(generating)] + [pool.submit(late)]
        for f in futures:
            f.result()
    big = sent["answer"]
    t_arrive, t_first = big.t_sent, big.stamps[0] if big.stamps else big.t_sent

    def rate_in(lo: float, hi: float) -> float:
        n = sum(1 for a in answers for s in a.stamps if lo <= s < hi)
        return n / (hi - lo) if hi > lo else 0.0

    return {"ttft_s": t_first - t_arrive, "others_before": rate_in(t_arrive - 1.5, t_arrive),
            "others_during": rate_in(t_arrive, t_first),
            "others_min_finished": min(a.stamps[-1] for a in answers) > t_first}


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):7.2f} ({min(values):.2f}-{max(values):.2f})"


# ----------------------------------------------------------------------------- profile

# (category, a frame name that puts a sample in it); the first match from the leaf up wins
CATEGORIES = [
    ("llama_decode", "Context.decode"),
    ("logits read", "Context.logits"),
    ("drafting", "SpecPolicy.propose"),
    ("drafting", "DraftModel."),
    ("sampling + verification", "verify"),
    ("sampling + verification", "Sampler."),
    ("token to text", "TextAssembler."),
    ("token to text", "Model.token_to_piece"),
    ("stream hand-off", "Stream._put"),
    ("stream hand-off", "Stream._end"),
    ("prompt cache", "PromptCache."),
    ("prompt cache", "Context.state_seq"),
    ("sampling + verification", "Engine._advance"),
    ("sampling + verification", "Engine._first_token"),
    ("token to text", "Engine._emit"),
    ("scheduling", "Engine._"),
]


def profile(server: Server, prompts: list[str], clients: int, max_tokens: int, rate: int = 200) -> dict:
    """One level under py-spy: each thread's share of the wall time, by category."""
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    out = tempfile.mktemp(suffix=".txt")
    rec = subprocess.Popen([spy, "record", "--pid", str(server.proc.pid), "-r", str(rate), "-f", "raw", "-o", out,
                            "--threads"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    t0 = time.perf_counter()
    level(server.url, prompts, clients, max_tokens, 2)
    wall = time.perf_counter() - t0
    rec.send_signal(signal.SIGINT)
    rec.wait(60)
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    for line in open(out):
        stack, _, n = line.rstrip().rpartition(" ")
        frames = [re.sub(r" \(.*", "", f) for f in stack.split(";")]
        if any(f.startswith("Engine._run") for f in frames):
            thread = "engine"
        elif any(f in ("BaseEventLoop.run_forever", "Server.serve", "run_app") or f.startswith("Server.") for f in frames):
            thread = "event loop"
        else:
            continue  # idle pool workers, the fleet's sweeper
        cat = "other"
        for f in reversed(frames):
            hit = next((c for c, key in CATEGORIES if f.startswith(key)), None)
            if hit:
                cat = hit
                break
        if thread == "event loop":
            cat = "idle (select)" if frames[-1].endswith(".select") else "HTTP/SSE, JSON"
        counts[(thread, cat)] += int(n)
    os.unlink(out)
    samples = rate * wall
    return {f"{t}: {c}": round(100 * n / samples, 1) for (t, c), n in sorted(counts.items(), key=lambda kv: -kv[1])}


# ----------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--llama-server", metavar="BIN_DIR", help="llama.cpp's build/bin (build-llama-anchor.sh)")
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--clients", default="1,2,4,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--per-client", type=int, default=2, help="requests each client sends per level")
    ap.add_argument("--ctx-size", type=int, default=4096, help="per slot")
    ap.add_argument("--servers", default="", help="comma-separated subset of the server names to run")
    ap.add_argument("--arrival", action="store_true")
    ap.add_argument("--profile", type=int, default=0, metavar="CLIENTS")
    ap.add_argument("--json")
    args = ap.parse_args()
    suite = [p for p in builtin_suite() if p.kind in PROMPT_KINDS]
    edits, others = [p for p in suite if p.kind != "code-generation"], [p for p in suite if p.kind == "code-generation"]
    prompts = [p.prompt for pair in zip(edits, others) for p in pair] + [p.prompt for p in edits[len(others):]]
    levels = [int(c) for c in args.clients.split(",") if c]
    common = ["--threads", str(args.threads)]
    ls = [sys.executable, "-m", "localspec", "serve", args.model, "--slots", str(args.slots), "--ctx-size",
          str(args.ctx_size), "--alias", "m", *common]
    logdir = tempfile.mkdtemp(prefix="serve-load-")
    # each localspec server starts with an empty prompt cache of its own, as llama-server does
    servers = [Server("localspec plain", [*ls, "--spec", "off"], {"LOCALSPEC_PROMPT_CACHE_DIR": f"{logdir}/cache-plain"},
                      localspec=True),
               Server("localspec spec", ls, {"LOCALSPEC_PROMPT_CACHE_DIR": f"{logdir}/cache-spec"}, localspec=True)]
    if args.llama_server:
        exe = os.path.join(args.llama_server, "llama-server")
        lls = [exe, "-m", args.model, "-np", str(args.slots), "-c", str(args.slots * args.ctx_size), "-t",
               str(args.threads), "--alias", "m"]
        env = {"LD_LIBRARY_PATH": args.llama_server}
        servers += [Server("llama-server plain", lls, env), Server("llama-server ngram-mod", [*lls, "--spec-type",
                                                                                              "ngram-mod"], env)]
    if args.servers:
        keep = args.servers.split(",")
        servers = [s for s in servers if s.name in keep]
    results: dict[str, dict] = {s.name: {"levels": {c: [] for c in levels}, "arrival": []} for s in servers}
    try:
        for s in servers:
            s.start(logdir)
            ask(s.url, "Say hello.", 8)  # warm-up (and localspec's cost calibration)
        for r in range(args.rounds):
            order = servers[r % len(servers):] + servers[: r % len(servers)]
            for c in levels:
                for s in order:
                    row = level(s.url, prompts, c, args.max_tokens, args.per_client)
                    results[s.name]["levels"][c].append(row)
                    print(f"round {r + 1} {s.name:24s} clients={c}: aggregate {row['aggregate']:.2f} tok/s, "
                          f"per-request median {row['per_request_median']:.2f}", file=sys.stderr, flush=True)
            if args.arrival:
                for s in order:  # a prompt of its own per server and round: no cache holds it
                    long_prompt = f"Review {r} for {s.name}. Summarise what this code does, file by file.\n\n" + \
                        "\n\n".join(p.prompt for p in suite) * 2
                    got = arrival(s.url, prompts, long_prompt, args.slots - 1, 256)
                    results[s.name]["arrival"].append(got)
                    print(f"round {r + 1} {s.name:24s} arrival: {got}", file=sys.stderr, flush=True)
        if args.profile:
            for s in servers:
                if s.localspec:
                    results[s.name]["profile"] = profile(s, prompts, args.profile, args.max_tokens)
    finally:
        for s in servers:
            s.stop()
    report(results, levels, args)


def report(results: dict[str, dict], levels: list[int], args) -> None:
    print(f"\n{args.rounds} rounds, {os.path.basename(args.model)}, {args.slots} slots, {args.threads} threads, "
          f"{args.max_tokens} tokens per request; median (min-max) over rounds")
    print(f"{'server':24s} {'clients':>7s} {'aggregate tok/s':>22s} {'per-request median':>22s} {'accepted':>9s}")
    for name, res in results.items():
        for c in levels:
            rows = res["levels"][c]
            acc = sum(r["accepted"] for r in rows)
            drafted = sum(r["drafted"] for r in rows)
            print(f"{name:24s} {c:7d} {spread([r['aggregate'] for r in rows]):>22s} "
                  f"{spread([r['per_request_median'] for r in rows]):>22s} "
                  f"{(f'{acc}/{drafted}' if drafted else '-'):>9s}")
    plain, spec = results.get("localspec plain"), results.get("localspec spec")
    if plain and spec:
        print("\nlocalspec spec / plain, per prompt (median over rounds): the slowest prompt at each level")
        for c in levels:
            ratios = {}
            for s, p in zip(spec["levels"][c], plain["levels"][c]):
                for i, rate in s["rates"].items():
                    if p["rates"].get(i):
                        ratios.setdefault(i, []).append(rate / p["rates"][i])
            if ratios:
                worst = min(ratios, key=lambda i: statistics.median(ratios[i]))
                print(f"  clients={c}: {statistics.median(ratios[worst]):.2f} (prompt {worst})")
    for name, res in results.items():
        if res["arrival"]:
            a = res["arrival"]
            print(f"arrival {name:24s} ttft {spread([x['ttft_s'] for x in a])} s, others' tok/s before "
                  f"{spread([x['others_before'] for x in a])}, during {spread([x['others_during'] for x in a])}")
    for name, res in results.items():
        if "profile" in res:
            print(f"\nprofile of {name} ({args.profile} clients): % of wall time per thread")
            for k, v in res["profile"].items():
                print(f"  {v:5.1f}%  {k}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": os.path.basename(args.model), "slots": args.slots, "threads": args.threads,
                       "max_tokens": args.max_tokens, "results": results}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
