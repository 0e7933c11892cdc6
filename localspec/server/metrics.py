"""The server's Prometheus metrics, in a registry of its own (one per app, so that tests
and several apps in a process do not share counters)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from localspec.types import Result

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("localspec_requests", "HTTP requests by route and status", ["route", "status"], registry=r)
        self.prompt_tokens = Counter("localspec_prompt_tokens", "Prompt tokens processed", registry=r)
        self.cached_tokens = Counter("localspec_prompt_tokens_cached", "Prompt tokens reused from a slot's cache", registry=r)
        self.completion_tokens = Counter("localspec_completion_tokens", "Tokens generated", registry=r)
        self.ttft = Histogram("localspec_time_to_first_token_seconds", "Time to first token", buckets=LATENCY_BUCKETS, registry=r)
        self.tpot = Histogram("localspec_time_per_output_token_seconds", "Decode time per generated token",
                              buckets=LATENCY_BUCKETS, registry=r)
        self.drafted = Counter("localspec_spec_drafted_tokens", "Tokens drafted", ["model", "drafter"], registry=r)
        self.accepted = Counter("localspec_spec_accepted_tokens", "Drafted tokens accepted", ["model", "drafter"],
                                registry=r)
        self.accepted_at = Counter("localspec_spec_decode_num_accepted_tokens_per_pos",
                                   "Drafted tokens accepted, by position in the draft (1-based)", ["model", "position"],
                                   registry=r)
        self.slots_busy = Gauge("localspec_slots_busy", "Slots running a request", ["model"], registry=r)
        self.embedded = Counter("localspec_embeddings", "Inputs embedded", ["model"], registry=r)
        self.queue_depth = Gauge("localspec_queue_depth", "Requests waiting for a slot", ["model"], registry=r)

    def finished(self, result: Result, model: str = "") -> None:
        u, t = result.usage, result.timings
        self.prompt_tokens.inc(u.prompt_tokens)
        self.cached_tokens.inc(u.cached_tokens)
        self.completion_tokens.inc(u.completion_tokens)
        if u.completion_tokens:
            self.ttft.observe(t.prompt_s)
        if t.decode_tokens:
            self.tpot.observe(t.decode_s / t.decode_tokens)
        spec = result.spec
        if spec is not None:
            for drafter, (drafted, accepted) in spec.by_drafter.items():
                self.drafted.labels(model, drafter).inc(drafted)
                self.accepted.labels(model, drafter).inc(accepted)
            for position, count in spec.accepted_at.items():
                self.accepted_at.labels(model, str(position)).inc(count)

    def render(self) -> bytes:
        return generate_latest(self.registry)
