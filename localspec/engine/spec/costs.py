"""What decodes cost here: measured at start (calibration), followed online, and
remembered per model file, draft, threads and llama.cpp build (the cache), so that only
the first run on a machine pays the few seconds of calibration."""

from __future__ import annotations

import json
import os
import statistics
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import platformdirs

from localspec.engine.spec.tuning import TUNING

if TYPE_CHECKING:
    from localspec.engine import backend
    from localspec.engine.spec.draftmodel import DraftModel


class Costs:
    """What a target decode of b tokens and a draft step cost here, measured: calibrated
    at start (or remembered from an earlier run), then followed online. A machine's speed
    drifts by tens of percent within minutes (clocks, neighbours) while the shape of its
    costs (what b tokens cost against one) holds, and single decodes are timed every few
    steps but a batch of 64 perhaps once a minute: so T(1) is followed as the median of
    its last ``cost_window`` decodes, and every other size as the median of its last ``cost_window`` ratios
    to the T(1) of its time. T(b) is that ratio times today's T(1). Kept in seconds, a
    batch timed in a fast minute would look cheap against single decodes of a slow one,
    and the choice of k would follow the clock instead of the costs. A median shrugs off
    the spikes a busy machine throws. A size calibrated (or remembered) keeps that figure
    until it has been timed online ``cost_trust`` times, then follows those timings: a
    size drafted rarely is timed rarely, and one disturbed timing averaged into its figure
    made it look too dear to draft, so it was never timed again (the cache held T(4) at
    5.4 T(1); calibrated afresh, 2.9). Remembered figures age out (``cost_max_age``)."""

    def __init__(self) -> None:
        self._obs: dict[int, deque[float]] = {}  # size 1: seconds; others: ratios to T(1)
        self._ratio: dict[int, float] = {}  # median ratio to T(1) by size (1.0 for size 1)
        self._prior: dict[int, float] = {}  # ratios calibrated here or remembered, by size
        self.timed_at = 0.0  # when the figures were calibrated (Unix time; 0: not yet)
        self.disturbed = False  # T(1) moved during calibration: its figures are not remembered
        self.t1 = 0.0  # seconds per single-token decode now
        self._shape: np.ndarray | None = None  # T(b) / T(1) for b = 1, 2, ...
        self._shaped: dict[int, float] = {}  # the ratios the shape was built from
        self.draft_step = 0.0  # seconds per draft decode (all slots together)
        self.draft_per_token = 0.0  # seconds per drafted token, whole phases measured
        self._phase_s = 0.0
        self._phase_n = 0.0
        self._prompt: deque[float] = deque(maxlen=TUNING.prompt_window)
        self.prompt_token_s = 0.0  # seconds a prompt row adds to a step (0: not yet timed)

    def set_target(self, b: int, seconds: float) -> None:
        """A figure timed now (calibration) or remembered, replacing what was observed of
        its size: size 1 first, since the others are kept as ratios to it."""
        self._obs.pop(b, None)
        if b == 1:
            self.observe_target(1, seconds)
            return
        self._guess_t1(b, seconds)
        self._prior[b] = self._ratio[b] = seconds / self.t1  # apart from the online timings
        self._shape = None

    def _guess_t1(self, b: int, seconds: float) -> None:
        """A batch timed before any single decode (all slots busy since the start): T(1)
        guessed as if b tokens cost b decodes, the guess under which nothing is drafted,
        one vote that the first single decodes outvote."""
        if self.t1 <= 0:
            self.set_target(1, seconds / b)

    def observe_target(self, b: int, seconds: float) -> None:
        window = self._obs.setdefault(b, deque(maxlen=TUNING.cost_window))
        if b == 1:
            window.append(seconds)
            self.t1 = statistics.median(window)
            self._ratio[1] = 1.0
            return
        self._guess_t1(b, seconds)
        window.append(seconds / self.t1)
        prior = self._prior.get(b)
        trusted = prior is None or len(window) >= TUNING.cost_trust
        self._ratio[b] = new = statistics.median(window) if trusted else prior
        shaped = self._shaped.get(b)
        if shaped is None or abs(new - shaped) > 0.01 * shaped:  # the shape follows moves over 1%
            self._shape = None

    def observe_prompt(self, rows: int, prompt_rows: int, seconds: float) -> None:
        """A step that fed ``prompt_rows`` prompt rows beside ``rows - prompt_rows`` others:
        what each prompt row added, past what the others cost alone."""
        others = rows - prompt_rows
        rest = seconds - (self.target_s(others) if others else 0.0)
        self._prompt.append(max(rest, 0.0) / prompt_rows)
        self.prompt_token_s = statistics.median(self._prompt)

    def target_s(self, b: int) -> float:
        """Seconds a decode of b rows costs now (0 before any was timed)."""
        return float(self.table(b)[-1]) if self.t1 > 0 else 0.0

    def table(self, n: int) -> np.ndarray:
        """[T(1), ..., T(n)] in seconds as an array (index b - 1): the choice of k reads it
        every step, for every k, so the shape is rebuilt only when a ratio moves."""
        if self._shape is None or self._shape.size < n:
            self._shape = self._build(max(n, TUNING.cost_table_min))
            self._shaped = dict(self._ratio)
        return self._shape[:n] * (self.t1 if self.t1 > 0 else 1.0)

    def pad_to(self, b: int, limit: int) -> int:
        """How many rows to decode b rows as: b, or the larger size up to ``limit`` that
        was measured cheaper than b itself. CPU kernels work in tiles, and a batch just
        short of one costs more than the whole tile (here 63 rows 1.24 times 64, 31 rows
        1.1 times 32), so the engine pads such a batch with rows that want no logits. The
        cost table assumes it: a size never costs more than a larger one."""
        ratio = self._ratio.get(b)
        if ratio is None or b <= 1:
            return b  # never timed: timed as it is, once
        cheaper = [(r, size) for size, r in self._ratio.items() if b < size <= limit and r < ratio]
        return min(cheaper)[1] if cheaper else b  # the cheapest; of equals, the smallest

    def implausible(self) -> list[int]:
        """Sizes whose figure cannot be right: a batch of b costing more than
        ``implausible_factor`` times b single decodes, by more than timer jitter
        (``implausible_ms``: a tiny model's 0.1 ms decodes are all jitter). A figure
        remembered from a disturbed run is otherwise kept for good: a size that looks
        expensive is never drafted, so never timed again (a cache here held SmolLM2's T(2)
        at 52 times T(1)). A remembered one is forgotten, and calibration times it again."""
        limit = TUNING.implausible_factor
        return [b for b, r in sorted(self._ratio.items())
                if b > 1 and r > limit * b and (r - limit * b) * self.t1 > TUNING.implausible_ms / 1e3]

    def observe_draft(self, seconds: float) -> None:
        self.draft_step = seconds if self.draft_step == 0 else 0.9 * self.draft_step + 0.1 * seconds

    def observe_drafting(self, seconds: float, drafted: int) -> None:
        """A whole draft phase: catch-up, every draft decode, and decodes whose token the
        confidence cut (--draft-p-min) threw away. Its cost per drafted token is what a
        draft really costs, and what the choice of k weighs."""
        self._phase_s = self._phase_s * 0.9 + seconds
        self._phase_n = self._phase_n * 0.9 + drafted
        self.draft_per_token = self._phase_s / max(self._phase_n, 1.0)

    @property
    def draft_token(self) -> float:
        """Seconds per drafted token: measured per phase once known, else one step; never
        more than three steps (a phase that cost more was not steady-state drafting)."""
        per_token = min(self.draft_per_token, 3 * self.draft_step) if self.draft_step else self.draft_per_token
        return max(per_token, self.draft_step)

    def target(self, b: int) -> float:
        return float(self.table(b)[b - 1])

    def _build(self, n: int) -> np.ndarray:
        """Cost of a target decode of b = 1..n tokens against one: measured, else what the next
        measured size costs (extrapolated past the largest), then held to what must be
        true: never more than a larger batch costs, and never more than b single decodes
        (a stale or unlucky figure breaks these). An unmeasured size is not a line between
        two measured ones: kernels work in tiles (here 31 rows cost more than 32, 63 than 64)."""
        b = np.arange(1, n + 1)
        if not self._ratio:  # nothing measured yet: a cautious guess, roughly a CPU's shape
            return 1.0 + 0.15 * (b - 1.0)
        sizes = np.array(sorted(self._ratio))
        t = np.array([self._ratio[int(x)] for x in sizes])
        last = sizes[-1]
        if sizes.size >= 2:
            slope = max(0.0, (t[-1] - t[-2]) / (last - sizes[-2]))
            beyond = t[-1] + slope * (b - last)
        else:
            beyond = t[-1] * b / last
        at_or_above = np.searchsorted(sizes, b, side="left")
        out = np.where(at_or_above < sizes.size, t[np.minimum(at_or_above, sizes.size - 1)], beyond)
        larger_min = np.append(np.minimum.accumulate(t[::-1])[::-1], np.inf)  # min over sizes[i:]
        out = np.minimum(out, larger_min[np.searchsorted(sizes, b, side="right")])
        if sizes[0] == 1:
            out = np.minimum(out, b * t[0])
        return out

    def snapshot(self) -> dict[int, float]:
        """Seconds by measured size, at today's T(1): as measured, not as the table holds
        them (a size just short of a tile costs more than the tile, and is padded to it)."""
        if self.t1 <= 0:
            return {}
        return {b: self._ratio[b] * self.t1 for b in sorted(self._ratio)}

    def to_dict(self) -> dict:
        return {"target": {str(b): t for b, t in self.snapshot().items()}, "draft_step": self.draft_step,
                "draft_per_token": self.draft_per_token, "timed_at": self.timed_at}

    @classmethod
    def from_dict(cls, data: dict) -> Costs:
        costs = cls()
        for b, t in sorted((int(b), float(t)) for b, t in data.get("target", {}).items()):
            costs.set_target(b, t)
        for b in costs.implausible():
            costs._obs.pop(b, None)
            costs._ratio.pop(b, None)
            costs._prior.pop(b, None)
        costs._shape = None
        costs.draft_step = float(data.get("draft_step", 0.0))
        costs.draft_per_token = float(data.get("draft_per_token", 0.0))
        costs.timed_at = float(data.get("timed_at", 0.0))
        return costs


def calibrate(costs: Costs, ctx: backend.Context, batch: backend.Batch, seq: int, token: int,
              sizes: list[int], draft: DraftModel | None = None) -> None:
    """Time target decodes of ``sizes`` (and one draft step, if not known) on a free
    sequence, so that the first choice of draft length rests on this machine's numbers.
    Must run on the engine thread (llama.cpp's thread pool lives there; the first decode
    also warms it up)."""
    def median_decode(b: int) -> float:
        times = []
        for _ in range(3):
            batch.clear()
            for i in range(b):
                batch.add(token, i, seq, True)
            t0 = time.perf_counter()
            ctx.decode(batch)
            times.append(time.perf_counter() - t0)
            ctx.seq_rm(seq, -1, -1)
        return sorted(times)[1]  # the median: the minimum flatters

    first = median_decode(1)
    costs.set_target(1, first)
    for b in sizes:
        if b > 1:
            costs.set_target(b, median_decode(b))
    last = median_decode(1)  # the ratios hold only if T(1) held meanwhile
    costs.set_target(1, last)
    if abs(last - first) > max(TUNING.calibration_drift * first, TUNING.implausible_ms / 1e3):  # not jitter
        costs.disturbed = True
    if not costs.timed_at:
        costs.timed_at = time.time()
    batch.clear()
    if draft is not None and not costs.draft_step:
        costs.draft_step = draft.time_step(seq, token) * TUNING.draft_overhead


# ------------------------------------------------------------------ the cache on disk

def _path() -> Path:
    return Path(platformdirs.user_cache_dir("localspec")) / "costs.json"


def _file_id(path: Path | str | None) -> str:
    if path is None:
        return "-"
    st = Path(path).stat()
    return f"{Path(path).resolve()}:{st.st_size}:{int(st.st_mtime)}"


def cache_key(model: Path | str, draft: Path | str | None, threads: int | None, kv_type: str) -> str:
    from localspec.engine import backend

    n = threads or backend.default_threads()
    return f"{_file_id(model)}|{_file_id(draft)}|t{n}|{kv_type}|llama-cpp-python {backend.library_version()}"


def load_cached(k: str) -> Costs | None:
    """The figures remembered for ``k``, unless older than ``cost_max_age``: a figure too
    dear to draft is never timed again, so none is kept for good."""
    if os.environ.get("LOCALSPEC_NO_COST_CACHE"):
        return None
    try:
        data = json.loads(_path().read_text())
        costs = Costs.from_dict(data[k]) if k in data else None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if costs is None or not 0 <= time.time() - costs.timed_at <= TUNING.cost_max_age:
        return None
    return costs


def save_cached(k: str, costs: Costs) -> None:
    if os.environ.get("LOCALSPEC_NO_COST_CACHE") or costs.disturbed:
        return
    path = _path()
    try:
        data = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        data = {}
    data.pop(k, None)
    data[k] = costs.to_dict()
    data = dict(list(data.items())[-TUNING.cost_cache_entries:])  # the most recently used models
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache only costs the next run its calibration
