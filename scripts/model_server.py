"""``localspec serve`` as a model server beside llama.cpp's llama-server, in one run:
time to first token for a cold model (loaded by the request) and a warm one, and
embeddings per second for 64 short texts.

    python scripts/model_server.py LLAMA_SERVER_BIN_DIR CHAT.gguf EMBED.gguf [--repeats 5] [--json out.json]

localspec: one ``serve CHAT EMBED`` process (nothing loaded at start); a cold request is
the first after the model was unloaded (``keep_alive: 0`` on the request before), a warm
one follows a request that kept it. llama-server loads its one model at start, so its
cold figure is start to first token (process start, load, first request); its warm one
is a request to the running server. TTFT is the time from sending a streamed chat
request (greedy, 8 tokens) to its first content chunk; every prompt is new to the
server, so no prompt cache helps. Embeddings: one request of 64 texts, ``repeats`` times,
on each server with the same file, context 512 a sequence and the same threads
(llama-server with one slot and with eight).
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

TEXTS = [f"Note {i}: the meeting about item {i * 7 % 13} moved to room {i % 5}." for i in range(64)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: dict, timeout: float = 300) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def log():
    """A server's stderr: a file, never a pipe nobody reads (llama-server logs every request and blocks on a full one)."""
    return tempfile.TemporaryFile("w+")


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit("server did not become ready")


def ttft(url: str, model: str, prompt: str, **extra) -> float:
    """Seconds from sending a streamed chat request to its first content chunk (the rest is read)."""
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 8, "temperature": 0,
            "stream": True, **extra}
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first = None
    with urllib.request.urlopen(req, timeout=300) as resp:
        for line in resp:
            if first is None and line.startswith(b"data: {"):
                chunk = json.loads(line[6:])
                if chunk.get("choices") and chunk["choices"][0].get("delta", {}).get("content"):
                    first = time.perf_counter() - t0
    if first is None:
        raise SystemExit(f"{model}: no content streamed")
    return first


def embeds_per_s(url: str, model: str) -> float:
    t0 = time.perf_counter()
    out = post(url + "/v1/embeddings", {"model": model, "input": TEXTS})
    assert len(out["data"]) == len(TEXTS)
    return len(TEXTS) / (time.perf_counter() - t0)


def summary(xs: list[float]) -> dict:
    return {"median": round(statistics.median(xs), 4), "min": round(min(xs), 4), "max": round(max(xs), 4), "n": len(xs)}


def prompt(i: int) -> str:
    return f"In one short sentence, what is {i} times {i + 3}?"


def localspec_side(chat: Path, embed: Path, repeats: int, threads: int) -> dict:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "localspec", "serve", str(chat), str(embed), "--port", str(port),
                             "--ctx-size", "512", "--slots", "1", "--threads", str(threads)],
                            stdout=subprocess.DEVNULL, stderr=log(), text=True,
                            env={k: v for k, v in os.environ.items() if k != "LOCALSPEC_NO_COST_CACHE"})
    try:
        wait_ready(url, proc)
        name = chat.name.removesuffix(".gguf")
        ttft(url, name, prompt(0), keep_alive=0)  # a first load measures the costs once; not counted
        cold, warm = [], []
        for r in range(repeats):
            cold.append(ttft(url, name, prompt(100 + r)))  # the one before ended with keep_alive 0
            warm.append(ttft(url, name, prompt(200 + r), keep_alive=0))
        emb_name = embed.name.removesuffix(".gguf")
        embeds_per_s(url, emb_name)  # load and first context: not counted
        rates = [embeds_per_s(url, emb_name) for _ in range(repeats)]
        return {"ttft_cold_s": summary(cold), "ttft_warm_s": summary(warm), "embeddings_per_s": summary(rates)}
    finally:
        proc.terminate()
        proc.wait(30)


def llama_server_side(bin_dir: Path, chat: Path, embed: Path, repeats: int, threads: int) -> dict:
    exe = str(bin_dir / "llama-server")
    common = ["--host", "127.0.0.1", "-t", str(threads), "--no-warmup"]
    cold, warm = [], []
    for r in range(repeats):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        t0 = time.perf_counter()
        proc = subprocess.Popen([exe, "-m", str(chat), "--port", str(port), "-c", "512", "-np", "1", *common],
                                stdout=subprocess.DEVNULL, stderr=log(), text=True)
        try:
            wait_ready(url, proc)
            start = time.perf_counter() - t0
            cold.append(start + ttft(url, "x", prompt(100 + r)))
            warm.append(ttft(url, "x", prompt(200 + r)))
        finally:
            proc.terminate()
            proc.wait(30)
    out = {"ttft_cold_s": summary(cold), "ttft_warm_s": summary(warm)}
    for slots in (1, 8):  # one slot embeds the texts one by one; eight batch them as its slots fill
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        args = ["-c", str(512 * slots), "-np", str(slots)]
        proc = subprocess.Popen([exe, "-m", str(embed), "--port", str(port), "--embeddings", "-b", "512", "-ub", "512",
                                 *common, *args], stdout=subprocess.DEVNULL, stderr=log(), text=True)
        try:
            wait_ready(url, proc)
            embeds_per_s(url, "x")
            out[f"embeddings_per_s_np{slots}"] = summary([embeds_per_s(url, "x") for _ in range(repeats)])
        finally:
            proc.terminate()
            proc.wait(30)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bin_dir", type=Path)
    ap.add_argument("chat", type=Path)
    ap.add_argument("embed", type=Path)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    out = {"machine": os.uname().machine, "cpus": os.cpu_count(), "threads": a.threads,
           "chat": a.chat.name, "embed": a.embed.name, "texts": len(TEXTS),
           "localspec": localspec_side(a.chat, a.embed, a.repeats, a.threads),
           "llama-server": llama_server_side(a.bin_dir, a.chat, a.embed, a.repeats, a.threads)}
    text = json.dumps(out, indent=2)
    print(text)
    if a.json:
        a.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
