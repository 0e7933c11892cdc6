"""The benchmark behind ``localspec bench``: plain against speculative decoding, in one run,
on one loaded model, as ratios.

Every prompt is decoded greedily with speculation off, then with each requested mode;
the records say how fast each was (decode tokens per second, after the first token),
how much of the draft was kept, and whether the output was the same token for token. Where
it was not, the record gives the first differing position and the plain run's top-2 logit
gap there: on quantised files a batch and a single token go through different kernels, so
a flip at a gap under ~0.1 is numeric, a flip at a larger gap is a bug.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from localspec.engine import Engine
from localspec.errors import InvalidRequest
from localspec.types import Message, Request, SamplingParams

GREEDY = SamplingParams(temperature=0.0, seed=0)

_INVENTORY = '''import json
from dataclasses import dataclass, field


@dataclass
class Item:
    name: str
    quantity: int
    price: float
    tags: list = field(default_factory=list)


class Inventory:
    def __init__(self):
        self.items = {}

    def add(self, name, quantity, price, tags=None):
        if name in self.items:
            self.items[name].quantity += quantity
        else:
            self.items[name] = Item(name, quantity, price, tags or [])

    def remove(self, name, quantity):
        item = self.items[name]
        if quantity > item.quantity:
            raise ValueError("not enough " + name)
        item.quantity -= quantity
        if item.quantity == 0:
            del self.items[name]

    def total_value(self):
        total = 0
        for item in self.items.values():
            total += item.quantity * item.price
        return total

    def find_by_tag(self, tag):
        return [item for item in self.items.values() if tag in item.tags]

    def save(self, path):
        with open(path, "w") as f:
            json.dump({name: vars(item) for name, item in self.items.items()}, f)
'''

_SERVER = '''const express = require("express");
const app = express();
app.use(express.json());

let todos = [];
let nextId = 1;

app.get("/todos", (req, res) => {
  res.json(todos);
});

app.post("/todos", (req, res) => {
  const todo = { id: nextId++, title: req.body.title, done: false };
  todos.push(todo);
  res.status(201).json(todo);
});

app.put("/todos/:id", (req, res) => {
  const todo = todos.find((t) => t.id === parseInt(req.params.id));
  if (!todo) {
    return res.status(404).json({ error: "not found" });
  }
  todo.title = req.body.title ?? todo.title;
  todo.done = req.body.done ?? todo.done;
  res.json(todo);
});

app.delete("/todos/:id", (req, res) => {
  todos = todos.filter((t) => t.id !== parseInt(req.params.id));
  res.status(204).end();
});

app.listen(3000, () => console.log("listening on 3000"));
'''

_ARTICLE = (
    "The city council met on Tuesday to debate the future of the old railway depot on the "
    "east side of town. The depot, closed since 1998, has become a patchwork of broken "
    "windows and overgrown tracks, but several groups want to give it a second life. A "
    "coalition of local artists proposed turning the main hall into studios and a public "
    "gallery, funded by a mix of rent and a small arts grant. A housing developer offered to "
    "build two hundred apartments, a quarter of them priced below market rate, in exchange "
    "for a ten-year tax break. Residents of the neighbouring streets were divided: some "
    "welcomed new homes and shops, others feared traffic and the loss of the open space "
    "their children use as a playground. The council's own engineers reported that the "
    "soil near the tracks contains diesel residue and would need cleaning before anything "
    "is built, at a cost of about four million. After three hours of discussion the council "
    "voted to commission an independent study of both proposals, including the clean-up, "
    "and to hold two public meetings before the summer recess. The mayor said she hoped a "
    "decision could be reached by the end of the year."
)


@dataclass(frozen=True)
class BenchPrompt:
    name: str
    kind: str  # code-generation, code-editing, code-rewrite, chat, summarisation, or the user's
    prompt: str


SUITE: tuple[BenchPrompt, ...] = (
    BenchPrompt(
        "code-gen-1",
        "code-generation",
        "Write a Python class LRUCache with get and put methods that run in O(1), using a "
        "dict and a doubly linked list. Include docstrings and a short usage example.",
    ),
    BenchPrompt(
        "code-gen-2",
        "code-generation",
        "Write a Python function that reads a CSV file of bank transactions with the columns "
        "date, account and amount, and returns the balance at the end of each month for each "
        "account. Use type hints and explain the steps in comments.",
    ),
    BenchPrompt(
        "code-edit-1",
        "code-editing",
        "There is a bug in this Python module: remove() fails with a KeyError when the item "
        "does not exist. Fix it so that it raises ValueError instead. Output only the complete "
        "corrected module, without explanations.\n\n```python\n" + _INVENTORY + "```",
    ),
    BenchPrompt(
        "code-edit-2",
        "code-editing",
        "Change this Express server so that it listens on the port given by the PORT "
        "environment variable, defaulting to 3000. Output the complete file.\n\n```js\n"
        + _SERVER
        + "```",
    ),
    BenchPrompt(
        "code-rewrite",
        "code-rewrite",
        "Add type hints to every function and method in this Python module. Output the "
        "complete module and nothing else.\n\n```python\n" + _INVENTORY + "```",
    ),
    BenchPrompt(
        "chat",
        "chat",
        "What are three good habits for staying focused when working from home? "
        "Explain each one in a short paragraph.",
    ),
    BenchPrompt(
        "summary",
        "summarisation",
        "Summarise the following article in five bullet points, then give a one-sentence "
        "overall summary.\n\n" + _ARTICLE,
    ),
)


def load_prompts(path: Path) -> list[BenchPrompt]:
    """JSON Lines: {"prompt": ..., "name": optional, "kind": optional} per line."""
    prompts = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InvalidRequest(f"Cannot read the prompts file {path}: {exc.strerror}.") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            text = obj["prompt"]
            if not isinstance(text, str) or not text.strip():
                raise ValueError
        except (ValueError, KeyError, TypeError):
            raise InvalidRequest(
                f'{path}, line {number}: expected a JSON object with a non-empty "prompt".'
            ) from None
        prompts.append(
            BenchPrompt(str(obj.get("name", f"prompt-{number}")), str(obj.get("kind", "user")), text)
        )
    if not prompts:
        raise InvalidRequest(f"{path} holds no prompts.")
    return prompts


@dataclass
class RunRecord:
    prompt: str
    kind: str
    mode: str  # off, or the speculative mode asked for
    draft_max: int | None
    tokens: int
    decode_tokens_per_s: float
    ratio: float  # to plain decoding of the same prompt
    ran: str  # what actually ran (off, ngram, draft, ngram+draft)
    drafted: int = 0
    accepted: int = 0
    acceptance_rate: float = 0.0
    mean_accepted_per_step: float = 0.0
    draft_lengths: dict[int, int] = field(default_factory=dict)
    identical: bool = True
    first_difference: int | None = None
    plain_margin: float | None = None  # plain run's top-2 logit gap at the first difference
    llama_cpp_tokens_per_s: float | None = None  # raw llama.cpp on the same prompt (plain rows)
    ratios: list[float] = field(default_factory=list)  # one per round (--repeat)


def _generate(engine: Engine, prompt: BenchPrompt, max_tokens: int, spec: str):
    stream = engine.submit(
        Request(messages=[Message("user", prompt.prompt)], sampling=GREEDY, max_tokens=max_tokens, spec=spec,
                cache_prompt=False)
    )
    ids = [e.token_id for e in stream if e.token_id >= 0]
    return ids, stream.result


def _margin_at(engine: Engine, prompt: BenchPrompt, plain: list[int], position: int) -> float | None:
    """The plain run's top-2 logit gap at ``position``: decoded again the plain way (one
    token at a time), since a prefill of the same tokens goes through other kernels."""
    stream = engine.submit(
        Request(messages=[Message("user", prompt.prompt)], sampling=GREEDY, max_tokens=position + 1,
                spec="off", margins=True, cache_prompt=False)
    )
    events = [e for e in stream if e.token_id >= 0]
    if len(events) <= position or [e.token_id for e in events[:position]] != plain[:position]:
        return None  # the plain run did not repeat itself this far
    return events[position].margin


def run(
    engine: Engine,
    prompts: Iterable[BenchPrompt],
    modes: list[str],
    *,
    max_tokens: int = 256,
    sweep: list[int] | None = None,
    repeat: int = 1,
    on_record: Callable[[RunRecord], None] | None = None,
    reference: Callable[[list[int], int], float] | None = None,
) -> list[RunRecord]:
    """Plain, then every mode (and every draft_max of ``sweep``), for each prompt; with
    ``reference`` (prompt tokens, max tokens -> tok/s), raw llama.cpp on the same prompt.

    A machine's speed drifts by tens of percent within minutes (clocks, neighbours), so
    with ``repeat`` > 1 each round times plain and every variant back to back (in
    alternating order), a ratio is taken within each round, and the median is reported."""
    base = engine.spec
    variants = [(mode, dm) for mode in modes for dm in (sweep or [base.draft_max])]
    records: list[RunRecord] = []
    _generate(engine, BenchPrompt("warm-up", "warm-up", "Say hello."), 48, "off")
    for prompt in prompts:
        plain: list[int] = []
        plain_rates: list[float] = []
        runs: dict[tuple[str, int], list[tuple[list[int], Any]]] = {v: [] for v in variants}
        for r in range(max(1, repeat)):
            order = [None, *variants] if r % 2 == 0 else [*variants, None]
            for variant in order:
                if variant is None:
                    ids, res = _generate(engine, prompt, max_tokens, "off")
                    plain = plain or ids
                    plain_rates.append(res.timings.decode_tokens_per_s)
                else:
                    engine.set_spec(replace(base, draft_max=variant[1]))
                    runs[variant].append(_generate(engine, prompt, max_tokens, variant[0]))
        engine.set_spec(base)
        plain_tps = statistics.median(plain_rates)
        rec = RunRecord(prompt.name, prompt.kind, "off", None, len(plain), plain_tps, 1.0, "off",
                        ratios=[1.0] * len(plain_rates))
        if reference is not None:
            tokens, _ = engine.prepare(Request(messages=[Message("user", prompt.prompt)]))
            rec.llama_cpp_tokens_per_s = reference(tokens, len(plain))
        records.append(rec)
        if on_record:
            on_record(rec)
        for (mode, draft_max), done in runs.items():
            ids, res = done[-1]
            spec = res.spec
            ratios = [res_i.timings.decode_tokens_per_s / p for (_, res_i), p in zip(done, plain_rates) if p]
            diff = next((i for i, (a, b) in enumerate(zip(plain, ids)) if a != b), None)
            if diff is None and len(plain) != len(ids):
                diff = min(len(plain), len(ids))
            rec = RunRecord(
                prompt.name, prompt.kind, mode, draft_max, len(ids),
                statistics.median(res_i.timings.decode_tokens_per_s for _, res_i in done),
                statistics.median(ratios) if ratios else 0.0,
                spec.mode if spec else "off",
                spec.drafted if spec else 0,
                spec.accepted if spec else 0,
                spec.acceptance_rate if spec else 0.0,
                spec.mean_accepted_per_step if spec else 0.0,
                dict(spec.draft_lengths) if spec else {},
                diff is None,
                diff,
                ratios=[round(x, 4) for x in ratios],
            )
            if diff is not None and diff < len(plain):
                rec.plain_margin = _margin_at(engine, prompt, plain, diff)
            records.append(rec)
            if on_record:
                on_record(rec)
    return records


def summary(records: list[RunRecord]) -> dict[str, dict[str, float]]:
    """Per mode (and draft_max): mean, min and max of the ratio to plain."""
    groups: dict[str, list[float]] = {}
    for r in records:
        if r.mode == "off":
            continue
        groups.setdefault(f"{r.mode}@{r.draft_max}", []).append(r.ratio)
    return {
        key: {
            "mean_ratio": round(statistics.fmean(v), 3),
            "min_ratio": round(min(v), 3),
            "max_ratio": round(max(v), 3),
        }
        for key, v in groups.items()
    }


def best_draft_max(records: list[RunRecord]) -> dict[str, int]:
    """For each mode, the draft_max with the highest mean ratio (for --sweep)."""
    best: dict[str, tuple[float, int]] = {}
    for key, s in summary(records).items():
        mode, dm = key.split("@")
        if mode not in best or s["mean_ratio"] > best[mode][0]:
            best[mode] = (s["mean_ratio"], int(dm))
    return {mode: dm for mode, (_, dm) in best.items()}


def to_json(records: list[RunRecord], **meta: object) -> dict:
    return {
        **meta,
        "runs": [
            {**asdict(r), "draft_lengths": {str(k): v for k, v in r.draft_lengths.items()},
             "decode_tokens_per_s": round(r.decode_tokens_per_s, 2), "ratio": round(r.ratio, 3),
             "acceptance_rate": round(r.acceptance_rate, 4),
             "mean_accepted_per_step": round(r.mean_accepted_per_step, 3)}
            for r in records
        ],
        "summary": summary(records),
        "best_draft_max": best_draft_max(records),
    }
