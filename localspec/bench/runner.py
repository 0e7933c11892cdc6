"""Running the benchmark: plain against speculative decoding, in one run, on one loaded
model, with each round timing plain and every variant back to back.

Every prompt is decoded greedily with speculation off, then with each requested mode;
the records say how fast each was (decode tokens per second, after the first token),
how much of the draft was kept, and whether the output was the same token for token. Where
it was not, the record gives the first differing position and the plain run's top-2 logit
gap there: on quantised files a batch and a single token go through different kernels, so
a flip at a gap under ~0.1 is numeric, a flip at a larger gap is a bug.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from localspec.bench.report import RunRecord, first_difference
from localspec.bench.rounds import more_rounds
from localspec.bench.suite import BenchPrompt
from localspec.engine import Engine
from localspec.types import Constraint, Message, Request, SamplingParams, SpecConfig

GREEDY = SamplingParams(temperature=0.0, seed=0)


def _generate(engine: Engine, prompt: BenchPrompt, max_tokens: int, spec: SpecConfig,
              constraint: Constraint | None = None):
    stream = engine.submit(
        Request(messages=[Message("user", prompt.prompt)], sampling=GREEDY, max_tokens=max_tokens, spec=spec,
                cache_prompt=False, constraint=constraint)
    )
    ids = [e.token_id for e in stream if e.token_id >= 0]
    return ids, stream.result


def _ratios(done: list[tuple[list[int], Any]], plain_rates: list[float]) -> list[float]:
    """Each round's rate of a variant to plain's in the same round."""
    return [res.timings.decode_tokens_per_s / p for (_, res), p in zip(done, plain_rates) if p]


def _margin_at(engine: Engine, prompt: BenchPrompt, plain: list[int], position: int,
               constraint: Constraint | None = None) -> float | None:
    """The plain run's top-2 logit gap at ``position``: decoded again the plain way (one
    token at a time), since a prefill of the same tokens goes through other kernels."""
    stream = engine.submit(
        Request(messages=[Message("user", prompt.prompt)], sampling=GREEDY, max_tokens=position + 1,
                spec=SpecConfig(mode="off"), margins=True, cache_prompt=False, constraint=constraint)
    )
    events = [e for e in stream if e.token_id >= 0]
    if len(events) < position or [e.token_id for e in events[:position]] != plain[:position]:
        return None  # the plain run did not repeat itself this far
    if len(events) == position:  # the plain run ended here: the gap is that of its choice to end
        return stream.result.end_margin
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
    constraint: Constraint | None = None,
) -> list[RunRecord]:
    """Plain, then every mode (and every draft_max of ``sweep``), for each prompt; with
    ``reference`` (prompt tokens, max tokens -> tok/s), raw llama.cpp on the same prompt;
    with ``constraint``, every run under it (plain too).

    A machine's speed drifts by tens of percent within minutes (clocks, neighbours), so
    with ``repeat`` > 1 each round times plain and every variant back to back (in
    alternating order), a ratio is taken within each round, and the median is reported;
    where the ratios disagree, more rounds (``more_rounds``)."""
    base = engine.spec
    variants = [(mode, dm) for mode in modes for dm in (sweep or [base.draft_max])]
    records: list[RunRecord] = []
    plain_spec = replace(base, mode="off")
    prompts = list(prompts)
    # A whole answer's length: after a 48-token warm-up the first 256-token answer still
    # decoded 10% slower than the next three (24.8 against 27.1-28.2 tok/s, code-gen-1).
    warm_up = prompts[0] if prompts else BenchPrompt("warm-up", "warm-up", "Say hello.")
    _generate(engine, warm_up, max_tokens, plain_spec, constraint)
    for prompt in prompts:
        plain: list[int] = []
        plain_text = ""
        plain_rates: list[float] = []
        runs: dict[tuple[str, int], list[tuple[list[int], Any]]] = {v: [] for v in variants}
        r = 0
        while more_rounds(repeat, r, (_ratios(done, plain_rates) for done in runs.values())):
            order = [None, *variants] if r % 2 == 0 else [*variants, None]
            for variant in order:
                if variant is None:
                    ids, res = _generate(engine, prompt, max_tokens, plain_spec, constraint)
                    plain, plain_text = plain or ids, plain_text or res.text
                    plain_rates.append(res.timings.decode_tokens_per_s)
                else:
                    spec = replace(base, mode=variant[0], draft_max=variant[1])
                    runs[variant].append(_generate(engine, prompt, max_tokens, spec, constraint))
            r += 1
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
            ratios = _ratios(done, plain_rates)
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
            if diff is not None:
                rec.first_difference_char = first_difference(res.text, plain_text)
            if diff is not None and (diff < len(plain) or len(ids) > len(plain)):  # plain ended first: its EOS
                rec.plain_margin = _margin_at(engine, prompt, plain, diff, constraint)
            records.append(rec)
            if on_record:
                on_record(rec)
    return records
