"""Time llama.cpp's own llama-server on localspec's bench prompts, plain and with its
speculative modes, for the comparison the bench's ratios are read against.

    python scripts/vs_llama_server.py LLAMA_SERVER MODEL.gguf [--draft DRAFT.gguf]
        [--only code] [--configs ngram-mod,...] [--max-tokens 256] [--threads N] [--json OUT]

Each configuration starts its own server (greedy, prompt cache off, one slot), sends
every prompt through /v1/chat/completions (the model's chat template, as the bench
does) and reads llama-server's own decode timing; the ratio is to the plain server's
tokens/s on the same prompt, and "same" compares the text with the plain server's.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
import urllib.request

from localspec.bench.suite import builtin_suite

CONFIGS = {
    "plain": [],
    "ngram-simple": ["--spec-type", "ngram-simple"],
    "ngram-mod": ["--spec-type", "ngram-mod"],
    "ngram-simple n3 m8": ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3",
                           "--spec-ngram-simple-size-m", "8"],
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def serve(binary: str, model: str, threads: int, extra: list[str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [binary, "-m", model, "-c", "4096", "-t", str(threads), "-np", "1", "--port", str(port),
         "--no-warmup", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("llama-server did not start.")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("model")
    ap.add_argument("--draft")
    ap.add_argument("--only", default="")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--configs", help="comma-separated configuration names (default: all)")
    ap.add_argument("--json")
    args = ap.parse_args()
    configs = dict(CONFIGS)
    if args.draft:
        configs["draft n_max 3"] = ["--spec-type", "draft-simple", "-md", args.draft, "--spec-draft-n-max", "3"]
    if args.configs:
        wanted = ["plain", *(c.strip() for c in args.configs.split(","))]
        configs = {name: configs[name] for name in dict.fromkeys(wanted)}
    prompts = [p for p in builtin_suite() if args.only in p.name or args.only in p.kind]
    rows, plain = [], {}
    for name, extra in configs.items():
        proc, url = serve(args.server, args.model, args.threads, extra)
        try:
            post(url + "/v1/chat/completions", {"messages": [{"role": "user", "content": "Say hello."}],
                                               "max_tokens": 16, "temperature": 0})  # warm-up
            for p in prompts:
                out = post(url + "/v1/chat/completions", {
                    "messages": [{"role": "user", "content": p.prompt}], "max_tokens": args.max_tokens,
                    "temperature": 0, "cache_prompt": False, "seed": 0})
                text = out["choices"][0]["message"]["content"]
                t = out["timings"]
                tps = t["predicted_per_second"]
                if name == "plain":
                    plain[p.name] = (tps, text)
                row = {"config": name, "prompt": p.name, "tokens_per_s": round(tps, 2),
                       "ratio": round(tps / plain[p.name][0], 3), "same": text == plain[p.name][1],
                       "draft_n": t.get("draft_n"), "draft_n_accepted": t.get("draft_n_accepted")}
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            proc.terminate()
            proc.wait()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
