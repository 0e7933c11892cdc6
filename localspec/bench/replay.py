"""Replay n-gram speculation on a known greedy output, with the target replaced by it:
verification keeps the drafts' common prefix with the output (as greedy decoding does)
and each step is charged what a batch of its size costs on some machine. A change to
the choice of draft length is judged in seconds, on many machines' cost shapes, instead
of in minutes of benchmarking at several percent of noise per run; the oracle is the
best choice of k over the proposals made along the output. Used by the tests and by
``scripts/spec_sim.py``."""

from __future__ import annotations

from dataclasses import dataclass

from localspec.engine.spec.copy import CopyTracker
from localspec.engine.spec.costs import Costs
from localspec.engine.spec.ngram import NgramIndex
from localspec.engine.spec.patch import Tokenizer
from localspec.engine.spec.policy import SlotView, SpecPolicy
from localspec.engine.spec.state import SpecState
from localspec.engine.spec.store import Store
from localspec.engine.spec.suffix import SuffixIndex
from localspec.engine.spec.tuning import TUNING
from localspec.types import SpecConfig


def tile_cost(table: dict[int, float], b: int) -> float:
    """What a batch of b costs by ``table`` (seconds by batch size): an unlisted size
    what the next listed one costs (kernels work in tiles), past the largest in proportion."""
    for size in sorted(table):
        if size >= b:
            return table[size]
    last = max(table)
    return table[last] * b / last


def kept(drafts: list[int], truth: list[int], at: int) -> int:
    """How many of the drafts greedy verification keeps at output position ``at``."""
    n = 0
    while n < len(drafts) and at + n < len(truth) and drafts[n] == truth[at + n]:
        n += 1
    return n


def speedup(truth: list[int], table: dict[int, float], elapsed: float) -> float:
    """Plain decoding's time for the output (its first token comes from the prefill) over
    ``elapsed``."""
    return (len(truth) - 1) * tile_cost(table, 1) / elapsed if elapsed else 1.0


@dataclass
class Replayed:
    speedup: float  # plain decoding's time over speculation's
    steps: list[tuple[int, int]]  # (drafted, kept) of each step that drafted
    spec: SpecState


def replay(prompt: list[int], truth: list[int], table: dict[int, float], draft_max: int = 64,
           tokenizer: Tokenizer | None = None, store: Store | None = None,
           max_tokens: int | None = None) -> Replayed:
    """The engine's policy replayed; ``tokenizer`` (the model's) lets it read the diffs in
    the prompt, as the engine does; ``store``: earlier requests' texts to draft from.
    ``max_tokens``: the limit the output was recorded under; an output shorter ended
    there, which the engine cannot know: it drafts as far as the limit allows, and
    drafts past the end fail (without it, the replay never drafted past an answer's
    last token, and a short answer's failed last draft went unseen)."""
    costs = Costs()
    for b, seconds in sorted(table.items()):  # size 1 first: the others are ratios to it
        costs.set_target(b, seconds)
    policy = SpecPolicy(None, costs=costs)
    policy.tokenizer = tokenizer
    policy.store = store
    spec = policy.start(prompt, SpecConfig(mode="ngram", draft_max=draft_max))
    tokens = list(prompt)
    spec.emitted(truth[0])  # the first token comes from the prefill
    done, elapsed, steps = 1, 0.0, []
    while done < len(truth):
        view = SlotView(0, tokens, truth[done - 1], max(max_tokens or 0, len(truth)) - done - 1, spec, None)
        proposal = policy.propose([view]).get(0)
        drafts = proposal.tokens if proposal else []
        n = kept(drafts, truth, done)
        seconds = tile_cost(table, len(drafts) + 1)
        elapsed += seconds
        costs.observe_target(len(drafts) + 1, seconds)
        spec.record(proposal, n)
        if drafts:
            steps.append((len(drafts), n))
        for token in truth[done : done + n + 1]:
            spec.emitted(token)
        tokens.extend(truth[done - 1 : done + n])
        done += n + 1
    return Replayed(speedup(truth, table, elapsed), steps, spec)


def fixed_rule(prompt: list[int], truth: list[int], table: dict[int, float], n: int = 12, m: int = 48) -> float:
    """llama.cpp's ngram-simple rule (common/ngram-map.cpp, defaults n 12, m 48) replayed
    the same way, for comparison: when the last n tokens occurred earlier, draft the (at
    most m, at least n) tokens that followed their latest occurrence, whatever the costs."""
    history = [*prompt, *truth[:1]]
    done, elapsed = 1, 0.0
    while done < len(truth):
        drafts: list[int] = []
        cached = len(history) - 1  # llama.cpp's "tokens": all but the token just sampled
        if cached > n + m + 1:
            pattern = history[-n:]
            for j in range(cached - n - 1, 0, -1):  # the latest earlier match
                if history[j : j + n] == pattern:
                    if cached - (j + n) >= n:  # as llama-server, no draft past the token limit
                        drafts = history[j + n : j + n + min(m, cached - (j + n), len(truth) - done - 1)]
                    break
        good = kept(drafts, truth, done)
        elapsed += tile_cost(table, len(drafts) + 1)
        history.extend(truth[done : done + good + 1])
        done += good + 1
    return speedup(truth, table, elapsed)


def mod_rule(prompt: list[int], truth: list[int], table: dict[int, float], n: int = 24, m_min: int = 48,
             m_max: int = 64) -> float:
    """llama.cpp's ngram-mod rule (common/speculative.cpp, defaults n_match 24, n_min 48,
    n_max 64) replayed the same way: a table from every n tokens to the token that
    followed them (the latest occurrence wins), the output added in chunks of 32; a draft
    chains lookups from the last n tokens and is made only when at least ``m_min`` tokens
    chain. Fresh per request (llama-server shares the table across requests)."""
    history = [*prompt, *truth[:1]]
    table_next: dict[tuple[int, ...], int] = {}
    added = 0  # history[:added + n] is in the table

    def add_upto(end: int) -> None:
        nonlocal added
        for i in range(added, end - n):
            table_next[tuple(history[i : i + n])] = history[i + n]
        added = max(added, end - n)

    add_upto(len(prompt))
    done, elapsed = 1, 0.0
    while done < len(truth):
        cached = len(history) - 1
        if added + 32 < cached:
            add_upto(cached)
        window = history[-n:]
        drafts: list[int] = []
        room = min(m_max, len(truth) - done - 1)
        while len(drafts) < room:
            token = table_next.get(tuple(window[len(window) - n :]))
            if token is None:
                break
            drafts.append(token)
            window.append(token)
        if len(drafts) < m_min:
            drafts = []
        good = kept(drafts, truth, done)
        elapsed += tile_cost(table, len(drafts) + 1)
        history.extend(truth[done : done + good + 1])
        done += good + 1
    return speedup(truth, table, elapsed)


def oracle(prompt: list[int], truth: list[int], table: dict[int, float], draft_max: int = 64,
           ngram: tuple[int, int] = (1, 4)) -> float:
    """The best speedup any choice of draft lengths could reach with the proposals made
    along the output token by token (the n-gram index's and the copy's, whichever keeps
    more): at each step draft as far as will be kept, or less, whichever is cheaper over
    the rest of the output (a shortest path, computed backwards). A reference, not a
    bound: the policy's copy follows its own drafts and can propose other tokens."""
    index, copy = NgramIndex(prompt, *ngram), CopyTracker(SuffixIndex(prompt), TUNING.long_match)
    index.extend(truth[:1])
    copy.emitted(truth[0])
    keepable = [0] * len(truth)
    for i in range(1, len(truth)):
        _, proposal, start = index.propose(draft_max)
        n = kept(proposal, truth, i)
        index.accepted(start, min(1, n))
        keepable[i] = max(n, kept(copy.propose(draft_max)[1], truth, i))
        index.extend([truth[i]])
        copy.emitted(truth[i])
    end = len(truth)
    best = [0.0] * (end + 1)  # best[i]: the least time to produce truth[i:]
    for i in range(end - 1, 0, -1):
        best[i] = min(tile_cost(table, k + 1) + best[min(end, i + k + 1)] for k in range(keepable[i] + 1))
    return speedup(truth, table, best[1]) if end > 1 else 1.0


def draft_model(truth: list[int], matches: str, table: dict[int, float], draft_step: float, k: int) -> float:
    """A draft model drafting k tokens every step, replayed on a known greedy output:
    ``matches[i]`` is "1" where the draft's greedy choice after the true prefix is
    ``truth[i]``; while it matches its context is the true prefix, so a draft of k from
    position i keeps the run of matches from i (at most k). A step costs k draft steps and
    a target batch of k + 1."""
    done, elapsed = 1, 0.0
    while done < len(truth):
        room = min(k, len(truth) - done - 1)  # no draft past the end
        run = 0
        while run < room and matches[done + run] == "1":
            run += 1
        elapsed += room * draft_step + tile_cost(table, room + 1)
        done += run + 1
    return speedup(truth, table, elapsed)
