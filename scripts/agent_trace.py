"""An agent's edit-test-fix loop replayed through a live ``localspec serve``, with drafting
from earlier requests off and on: tokens/s and acceptance per request and overall, and
unrelated requests sent alongside (which must not slow down).

    python scripts/agent_trace.py MODEL.gguf [--store-tokens 0,32768] [--max-tokens 256] [--repeat N] [--json OUT]

The trace: ten stateless requests on a small repository, each sending the files it works
on and its task; five tasks, each sent again later as an agent's retry (a timed-out tool
call, a regenerate), so that what a request writes has often been written by an earlier
one. Each configuration starts its own server (two slots, greedy, n-gram speculation);
the trace runs alone, the unrelated requests alone and then alongside the retries.
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

INVENTORY = '''\
class Inventory:
    def __init__(self):
        self.items = {}
        self.history = []

    def add_item(self, name, qty, price):
        if qty <= 0:
            raise ValueError("quantity must be positive")
        if name in self.items:
            self.items[name]["qty"] += qty
        else:
            self.items[name] = {"qty": qty, "price": price}
        self.history.append(("add", name, qty))

    def stock(self, name):
        return self.items.get(name, {}).get("qty", 0)

    def value(self):
        return sum(item["qty"] * item["price"] for item in self.items.values())

    def cheapest(self):
        if not self.items:
            return None
        return min(self.items, key=lambda name: self.items[name]["price"])

    def report(self):
        lines = []
        for name in sorted(self.items):
            item = self.items[name]
            lines.append(f"{name}: {item['qty']} at {item['price']:.2f}")
        return "\\n".join(lines)
'''
TESTS = '''\
import pytest

from inventory import Inventory


def test_add_and_stock():
    inv = Inventory()
    inv.add_item("apple", 3, 0.5)
    inv.add_item("apple", 2, 0.5)
    assert inv.stock("apple") == 5


def test_value():
    inv = Inventory()
    inv.add_item("apple", 4, 0.5)
    inv.add_item("pear", 2, 1.25)
    assert inv.value() == 4.5


def test_bad_quantity():
    with pytest.raises(ValueError):
        Inventory().add_item("apple", 0, 0.5)
'''
TASKS = [
    ("Add a method remove_item(name, qty) to Inventory that lowers the stock and raises ValueError when qty is "
     "more than the stock.", "inventory.py"),
    ("Add a test for remove_item to the tests, including the ValueError case.", "test_inventory.py"),
    ("Add type hints to every method of inventory.py.", "inventory.py"),
    ("Rename the class Inventory to Stockroom in inventory.py.", "inventory.py"),
    ("Add a one-line docstring to every method of inventory.py.", "inventory.py"),
]
ORDER = [0, 1, 0, 2, 1, 3, 2, 4, 3, 4]  # each task once, then again as a retry
UNRELATED = ["Write a haiku about autumn rain.", "Explain in three sentences what a hash table is.",
             "Write a Python function that checks whether a string is a palindrome."]


def request_text(task: int, retry: bool) -> str:
    what, target = TASKS[task]
    files = f"inventory.py:\n```python\n{INVENTORY}```\n\ntest_inventory.py:\n```python\n{TESTS}```\n"
    note = "\n(Second attempt: the previous one timed out.)" if retry else ""
    return f"{files}\n{what} Output the whole {target}, nothing else.{note}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, content: str, max_tokens: int) -> dict:
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": 0,
            "speculative": {"mode": "ngram"}}
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=900) as r:
        return json.load(r)


def run(model: str, store_tokens: int, max_tokens: int) -> dict:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "localspec", "serve", model, "--port", str(port), "--slots", "2",
                             "--store-tokens", str(store_tokens), "--spec", "ngram"],
                            stderr=subprocess.DEVNULL, env={**os.environ, "LOCALSPEC_NO_COST_CACHE": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            if proc.poll() is not None:
                raise SystemExit(f"localspec serve exited ({proc.returncode}) before it was ready")
            try:
                with urllib.request.urlopen(url + "/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        post(url, "Say hello.", 8)  # warm-up
        rows = []
        seen: set[int] = set()
        for task in ORDER:
            retry = task in seen
            seen.add(task)
            out = post(url, request_text(task, retry), max_tokens)
            rows.append(_row(f"task {task + 1}" + (" (retry)" if retry else ""), out))
        unrelated = [_row(f"unrelated {i + 1}", post(url, text, max_tokens)) for i, text in enumerate(UNRELATED)]
        return {"store_tokens": store_tokens, "trace": rows, "unrelated": unrelated,
                "alongside": alongside(url, max_tokens)}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def alongside(url: str, max_tokens: int) -> list[dict]:
    """The unrelated requests again, one after another on the second slot, while the
    retries are sent again on the first (copied from the store, where it is on): what
    the store's drafts cost a request that shares the batch with them."""
    done: list[dict] = []
    thread = threading.Thread(target=lambda: done.extend(
        _row(f"unrelated {i + 1}", post(url, text, max_tokens)) for i, text in enumerate(UNRELATED)))
    thread.start()
    while thread.is_alive():
        for task in range(len(TASKS)):
            if not thread.is_alive():
                break
            post(url, request_text(task, True), max_tokens)
    thread.join()
    return done


def _row(name: str, out: dict) -> dict:
    t, s = out["timings"], out["speculative"]
    return {"request": name, "tokens": t["predicted_n"], "tokens_per_s": t["predicted_per_second"],
            "decode_ms": t["predicted_ms"], "drafted": s["drafted"], "accepted": s["accepted"],
            "text": out["choices"][0]["message"]["content"]}


def overall(rows: list[dict]) -> float:
    return sum(r["tokens"] for r in rows) / (sum(r["decode_ms"] for r in rows) / 1000)


def bound(first: list[dict], faster: list[dict]) -> float:
    """What the store could reach at most in a round: it can only help a request whose
    answer an earlier request wrote (here, the retries), and such a request at best runs
    at the round's fastest request's rate (a retry copied whole); the others stay as
    fast as without the store (``first``: that round's rows without it)."""
    fastest = max(r["tokens_per_s"] for r in faster)
    seconds = sum(r["tokens"] / fastest if "retry" in r["request"] else r["decode_ms"] / 1000 for r in first)
    return sum(r["tokens"] for r in first) / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--store-tokens", default="0,32768")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=1, help="rounds; each runs every configuration in turn")
    ap.add_argument("--json")
    a = ap.parse_args()
    sizes = [int(n) for n in a.store_tokens.split(",")]
    rounds = []
    for r in range(a.repeat):  # in alternating order: the second server of a round ran up to 20% slower
        order = list(range(len(sizes)))[:: 1 if r % 2 == 0 else -1]
        runs = {i: run(a.model, sizes[i], a.max_tokens) for i in order}
        rounds.append([runs[i] for i in range(len(sizes))])
    by_size = [[rnd[i] for rnd in rounds] for i in range(len(sizes))]  # per configuration, its rounds
    median = statistics.median
    print(f"{'request':22s}" + "".join(f" | store {n:>6}: tok/s  acc/drafted" for n in sizes)
          + f"   (median of {a.repeat} rounds)")
    names = [r["request"] for r in rounds[0][0]["trace"] + rounds[0][0]["unrelated"]]
    for i, name in enumerate(names):
        cells, texts = [], set()
        for runs in by_size:
            rows = [(r["trace"] + r["unrelated"])[i] for r in runs]
            texts.update(x["text"] for x in rows)
            cells.append(f" | {median(x['tokens_per_s'] for x in rows):13.1f}  "
                         f"{rows[-1]['accepted']:>4}/{rows[-1]['drafted']:<4}")
        print(f"{name:22s}" + "".join(cells) + ("" if len(texts) == 1 else "  (text differs)"))
    base = [overall(r["trace"]) for r in by_size[0]]
    for n, runs in zip(sizes, by_size):
        rates = [overall(r["trace"]) for r in runs]
        ratios = [x / b for x, b in zip(rates, base)]
        acc = sum(x["accepted"] for r in runs for x in r["trace"]) / max(1, sum(x["drafted"] for r in runs for x in r["trace"]))
        print(f"store {n}: trace {median(rates):.1f} tok/s overall ({median(ratios):.2f}x, rounds "
              f"{', '.join(f'{x:.2f}' for x in ratios)}), acceptance {acc:.0%}, unrelated "
              f"{median(x['tokens_per_s'] for r in runs for x in r['unrelated']):.1f} tok/s median")
        print(f"store {n}: unrelated requests alongside the retries "
              f"{median(x['tokens_per_s'] for r in runs for x in r['alongside']):.1f} tok/s median")
        if n:  # the most the store could give here, round by round
            bounds = [bound(off["trace"], on["trace"]) / b for off, on, b in zip(by_size[0], runs, base)]
            print(f"store {n}: at most {median(bounds):.2f}x here (every retry at its round's fastest request's "
                  f"rate; rounds {', '.join(f'{x:.2f}' for x in bounds)})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rounds, f, indent=1)


if __name__ == "__main__":
    main()
