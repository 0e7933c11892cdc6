"""llama.cpp's own llama-server on the bench's prompts: the anchor localspec's ratios are
read against, measured in the same run on the same machine.

Each configuration (plain, and llama.cpp's n-gram speculation modes) gets its own server
on a free loopback port: the same model file, threads and context, one slot, greedy,
prompt cache off, each prompt sent through ``/v1/chat/completions`` (the model's own chat
template, as the bench renders it). Every request gets a fresh server: ngram-mod's
n-gram table is shared by all of a server's requests, so a second round of a prompt
would be drafted from the first round's answer (measured on a type-hint rewrite: 251
tokens drafted instead of 229), while localspec's bench requests share nothing; and a
fresh server's first request decodes slower than a warm one's (plain, code-gen-1: 23.0
against 25.1 tok/s), so the plain runs a ratio is taken to start fresh too. The rate is llama-server's own decode timing; a
configuration's ratio is taken to the plain server's rate in the same round, and the
median over rounds is reported, as for localspec's modes.
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from localspec.bench.report import RunRecord, first_difference
from localspec.bench.rounds import more_rounds
from localspec.bench.suite import BenchPrompt
from localspec.errors import LocalspecError

CONFIGS: dict[str, list[str]] = {
    "plain": [],
    "ngram-simple": ["--spec-type", "ngram-simple"],
    "ngram-mod": ["--spec-type", "ngram-mod"],
}
START_TIMEOUT_S = 120.0
REQUEST_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Answer:
    tokens_per_s: float
    text: str
    tokens: int
    drafted: int
    accepted: int


def binary(bin_dir: Path) -> Path:
    """The llama-server in ``bin_dir``, or one sentence saying how to build it."""
    path = Path(bin_dir) / "llama-server"
    if not path.is_file():
        raise LocalspecError(f"No llama-server in {bin_dir}; ../shared/tools/build-llama-anchor.sh builds one and "
                             "prints its folder.")
    return path


class Server:
    """One llama-server process for one configuration."""

    def __init__(self, exe: Path, model: Path, config: str, *, threads: int, n_ctx: int) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.config = config
        self.proc = subprocess.Popen(
            [str(exe), "-m", str(model), "-c", str(n_ctx), "-t", str(threads), "-np", "1", "--port", str(self.port),
             "--no-warmup", *CONFIGS[config]],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LocalspecError(f"llama-server ({config}) exited at start: {self.proc.stderr.read()[-400:].strip()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        self.close()
        raise LocalspecError(f"llama-server ({config}) did not become ready within {START_TIMEOUT_S:.0f} s.")

    def ask(self, prompt: str, max_tokens: int) -> Answer:
        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0,
                "cache_prompt": False, "seed": 0}
        req = urllib.request.Request(self.url + "/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as r:
                out = json.load(r)
        except (OSError, ValueError) as exc:
            raise LocalspecError(f"llama-server ({self.config}) failed on a bench prompt: {exc}") from None
        t = out.get("timings", {})
        return Answer(float(t.get("predicted_per_second", 0.0)), out["choices"][0]["message"]["content"] or "",
                      int(t.get("predicted_n", 0)), int(t.get("draft_n") or 0), int(t.get("draft_n_accepted") or 0))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ratios(got: list[Answer], plain: list[Answer]) -> list[float]:
    """Each round's rate of a configuration to the plain server's in the same round."""
    return [a.tokens_per_s / b.tokens_per_s for a, b in zip(got, plain) if b.tokens_per_s]


def run(bin_dir: Path, model: Path, prompts: list[BenchPrompt], *, max_tokens: int, repeat: int, threads: int,
        n_ctx: int, on_record: Callable[[RunRecord], None] | None = None) -> list[RunRecord]:
    """Every configuration on every prompt, ``repeat`` rounds: records whose mode is
    ``llama-server <config>`` and whose ratio is to the plain server's in the same round."""
    exe = binary(bin_dir)

    def start(config: str) -> Server:
        server = Server(exe, model, config, threads=threads, n_ctx=n_ctx)
        server.ask("Say hello.", 16)  # warm-up
        return server

    answers: dict[str, dict[str, list[Answer]]] = {config: {p.name: [] for p in prompts} for config in CONFIGS}
    for p in prompts:
        r = 0
        while more_rounds(repeat, r, (_ratios(answers[c][p.name], answers["plain"][p.name]) for c in CONFIGS)):
            for config in CONFIGS:  # each round's configurations back to back, as localspec's modes
                with start(config) as server:
                    answers[config][p.name].append(server.ask(p.prompt, max_tokens))
            r += 1
    records = []
    for p in prompts:
        plain = answers["plain"][p.name]
        for config in CONFIGS:
            got = answers[config][p.name]
            ratios = _ratios(got, plain)
            last = got[-1]
            parts = None if last.text == plain[-1].text else first_difference(last.text, plain[-1].text)
            rec = RunRecord(p.name, p.kind, f"llama-server {config}", None, last.tokens,
                            statistics.median(a.tokens_per_s for a in got), statistics.median(ratios) if ratios else 0.0,
                            "llama-server", last.drafted, last.accepted,
                            last.accepted / last.drafted if last.drafted else 0.0, 0.0, {},
                            parts is None, parts, parts, ratios=[round(x, 4) for x in ratios])
            records.append(rec)
            if on_record:
                on_record(rec)
    return records

