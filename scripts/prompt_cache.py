"""The prompt cache on disk, timed beside llama-server's own prompt cache, in one run.

    python scripts/prompt_cache.py LLAMA_SERVER_BIN_DIR MODEL.gguf [--sizes 1024,4096,8192]
                                   [--repeats 3] [--json out.json]

For each prompt size (a file of this repository's source, cut to that many tokens, then
a question), with an empty prompt cache:

- localspec cold: ``localspec run MODEL "question A" -f FILE -n 1 --json`` in a new process;
- localspec restored: the same command again (a new process: the prefix comes from disk);
- localspec second question: ``run`` with question B on the same file (what a user does);
- llama-server: one process (``-np 1``, ``cache_prompt``), the request with question A
  cold, then question A again, then question B (its prompt cache in memory).

Time to first token is the engine's prompt time (``timings.prompt_s`` of run's JSON;
``timings.prompt_ms`` of llama-server's reply: from the request's start to its first
token, model already loaded); the localspec process's whole wall time (start, load,
prompt, one token) is reported beside it. Greedy, one token, the same threads. Also the
cache's disk size per 1,000 tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = ("\n\nIn one sentence: what does the code above do?", "\n\nName the first function defined above.")


def source_text() -> str:
    files = sorted((ROOT / "localspec").rglob("*.py"))
    return "\n\n".join(f"# {p.relative_to(ROOT)}\n{p.read_text()}" for p in files)


def cut(model: Path, text: str, n: int) -> str:
    """The leading part of ``text`` that is ``n`` tokens long (to a few tokens)."""
    from localspec.engine import backend

    m = backend.Model(model)
    try:
        tokens = m.tokenize(text, add_special=False, parse_special=False)[:n]
        return b"".join(m.token_to_piece(t) for t in tokens).decode("utf-8", "replace")
    finally:
        m.close()


def summary(xs: list[float]) -> dict:
    return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3), "max": round(max(xs), 3), "n": len(xs)}


def run(model: Path, doc: Path, question: str, cache: Path, threads: int, ctx: int) -> dict:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "localspec", "run", str(model), question, "-f", str(doc), "-n", "1",
                          "--json", "--temperature", "0", "--threads", str(threads), "--ctx-size", str(ctx)],
                         capture_output=True, text=True, timeout=1800,
                         env={**os.environ, "LOCALSPEC_PROMPT_CACHE_DIR": str(cache)})
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"localspec run failed: {out.stderr.strip()[-500:]}")
    record = json.loads(out.stdout)
    return {"prompt_s": record["timings"]["prompt_s"], "wall_s": wall,
            "prompt_tokens": record["usage"]["prompt_tokens"], "cached_tokens": record["usage"]["cached_tokens"]}


def localspec_side(model: Path, doc: Path, repeats: int, threads: int, ctx: int) -> dict:
    cold, restored, second, size = [], [], [], []
    for r in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            cache = Path(tmp) / "prompts"
            c = run(model, doc, QUESTIONS[0], cache, threads, ctx)
            states = list(cache.rglob("*.state"))
            size.append(sum(p.stat().st_size for p in states) / c["prompt_tokens"] * 1000)
            a = run(model, doc, QUESTIONS[0], cache, threads, ctx)
            b = run(model, doc, QUESTIONS[1], cache, threads, ctx)
            cold.append(c), restored.append(a), second.append(b)
    pick = lambda rows, k: summary([row[k] for row in rows])  # noqa: E731
    return {"prompt_tokens": cold[0]["prompt_tokens"],
            "cold_ttft_s": pick(cold, "prompt_s"), "cold_wall_s": pick(cold, "wall_s"),
            "restored_ttft_s": pick(restored, "prompt_s"), "restored_wall_s": pick(restored, "wall_s"),
            "restored_cached_tokens": restored[0]["cached_tokens"],
            "second_question_ttft_s": pick(second, "prompt_s"), "second_question_wall_s": pick(second, "wall_s"),
            "second_question_cached_tokens": second[0]["cached_tokens"],
            "disk_mib_per_1k_tokens": round(statistics.median(size) / (1 << 20), 2)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chat(url: str, text: str) -> dict:
    body = {"messages": [{"role": "user", "content": text}], "max_tokens": 1, "temperature": 0, "cache_prompt": True}
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=1800) as resp:
        return json.loads(resp.read())


def llama_server_side(bin_dir: Path, model: Path, text: str, repeats: int, threads: int, ctx: int) -> dict:
    cold, again, second, n = [], [], [], 0
    for _ in range(repeats):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with tempfile.TemporaryFile("w+") as log:
            proc = subprocess.Popen([str(bin_dir / "llama-server"), "-m", str(model), "--port", str(port),
                                     "--host", "127.0.0.1", "-c", str(ctx), "-np", "1", "-t", str(threads),
                                     "--no-warmup"], stdout=subprocess.DEVNULL, stderr=log)
            try:
                deadline = time.monotonic() + 300
                while True:
                    try:
                        with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                            if resp.status == 200:
                                break
                    except OSError:
                        if proc.poll() is not None or time.monotonic() > deadline:
                            raise SystemExit("llama-server did not start")
                        time.sleep(0.2)
                first = chat(url, text + QUESTIONS[0])
                n = first["timings"]["prompt_n"]
                cold.append(first["timings"]["prompt_ms"] / 1000)
                again.append(chat(url, text + QUESTIONS[0])["timings"]["prompt_ms"] / 1000)
                second.append(chat(url, text + QUESTIONS[1])["timings"]["prompt_ms"] / 1000)
            finally:
                proc.terminate()
                proc.wait(30)
    return {"prompt_tokens": n, "cold_ttft_s": summary(cold), "same_prompt_ttft_s": summary(again),
            "second_question_ttft_s": summary(second)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bin_dir", type=Path)
    ap.add_argument("model", type=Path)
    ap.add_argument("--sizes", default="1024,4096,8192")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    ctx = max(sizes) + 1024
    text = source_text()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        warm = Path(tmp) / "warm.txt"
        warm.write_text("def f():\n    return 1\n")
        run(args.model, warm, QUESTIONS[0], Path(tmp) / "c", args.threads, ctx)  # measure costs once: not counted
        for n in sizes:
            doc = Path(tmp) / f"doc{n}.txt"
            doc.write_text(cut(args.model, text, n))
            row = {"size": n, "localspec": localspec_side(args.model, doc, args.repeats, args.threads, ctx),
                   "llama_server": llama_server_side(args.bin_dir, args.model, doc.read_text().rstrip("\n") + "\n",
                                                     args.repeats, args.threads, ctx)}
            ls = row["localspec"]
            row["restored_speedup"] = round(ls["cold_ttft_s"]["median"] / ls["restored_ttft_s"]["median"], 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
    out = {"model": args.model.name, "threads": args.threads, "repeats": args.repeats, "rows": rows}
    print()
    print(f"{'tokens':>7} | {'ls cold':>9} {'ls restored':>12} {'x':>5} {'ls 2nd q':>9} {'ls 2nd wall':>11} | "
          f"{'ll cold':>9} {'ll same':>9} {'ll 2nd q':>9} | MiB/1k")
    for r in rows:
        ls, ll = r["localspec"], r["llama_server"]
        print(f"{ls['prompt_tokens']:>7} | {ls['cold_ttft_s']['median']:>9.3f} {ls['restored_ttft_s']['median']:>12.3f} "
              f"{r['restored_speedup']:>5} {ls['second_question_ttft_s']['median']:>9.3f} "
              f"{ls['second_question_wall_s']['median']:>11.3f} | {ll['cold_ttft_s']['median']:>9.3f} "
              f"{ll['same_prompt_ttft_s']['median']:>9.3f} {ll['second_question_ttft_s']['median']:>9.3f} | "
              f"{ls['disk_mib_per_1k_tokens']}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
