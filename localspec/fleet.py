"""The models a server can serve, loaded on demand within a memory budget.

A ``Fleet`` knows what it may serve (``Servable``: a profile, a cached GGUF, a model
named at start) and holds the engines loaded so far. ``acquire`` finds a model by any of
its names, loads it on first use (one load per model, whoever else asks waits for it)
and returns a ``Lease``; a model with a lease out is never unloaded. Before a load, the
memory plan (``plan.py``) of the model and its draft is made for what the budget has
left beside the loaded ones; where it does not fit as it would alone, the least recently
used idle model is unloaded first. Idle models unload after their keep-alive.

Nothing here prints: the server's log gets ``note`` lines.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from localspec.errors import LocalspecError, ModelLoadError, ModelNotFound, NotInCache, OutOfMemory
from localspec.loader import Files, open_files, plan_files, resolve_files
from localspec.plan import Device, GiB, Plan
from localspec.settings import Settings, updated

SWEEP_S = 0.5  # how often idle models are checked for their keep-alive


class Unavailable(LocalspecError):
    """A model that cannot be loaded now (memory held by requests in flight): 503."""

    http_status = 503

    def __init__(self, message: str, *, retry: bool = True) -> None:
        super().__init__(message)
        self.retry = retry


@dataclass(frozen=True)
class Servable:
    """One model a request may name: ``id`` (shown), other ``names``, its settings."""

    id: str
    names: tuple[str, ...]
    settings: Settings
    download: bool = False  # may its files be downloaded at load (named at start, or --pull)


@dataclass
class Loaded:
    """A model in memory (or being loaded: ``engine`` None, ``ready`` unset)."""

    servable: Servable
    files: Files | None = None
    plan: Plan | None = None
    engine: Any = None
    ready: threading.Event = field(default_factory=threading.Event)
    error: LocalspecError | None = None
    holds: int = 0
    last_used: float = field(default_factory=time.monotonic)
    keep_alive: float | None = None  # seconds idle before unloading; None: never

    @property
    def idle_s(self) -> float | None:
        return None if self.holds else time.monotonic() - self.last_used

    def planned(self) -> dict[str, int]:
        """Bytes this model's plan takes on each device, by device name."""
        return {d.name: d.planned_bytes for d in self.plan.devices} if self.plan else {}


class Lease:
    """A model held for one request; ``release`` once the request has ended."""

    def __init__(self, fleet: Fleet, loaded: Loaded) -> None:
        self._fleet, self.loaded, self._released = fleet, loaded, False

    @property
    def engine(self) -> Any:
        return self.loaded.engine

    @property
    def id(self) -> str:
        return self.loaded.servable.id

    def release(self, keep_alive: float | None | str = "default") -> None:
        if not self._released:
            self._released = True
            self._fleet._release(self.loaded, keep_alive)


def parse_keep_alive(value: Any) -> float | None:
    """Ollama's keep-alive: a duration ("30s", "5m", "1h", "1h30m"), a number of seconds,
    0 (unload when done) or a negative value (never). None is never; raises ValueError."""
    if isinstance(value, bool):
        raise ValueError("must be a duration such as 5m, 30s or 1h, 0, or -1")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        text = str(value).strip().lower()
        try:
            seconds = float(text)
        except ValueError:
            parts = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?", text)
            if not text or parts is None:
                raise ValueError("must be a duration such as 5m, 30s or 1h, 0, or -1") from None
            h, m, s = (float(p) if p else 0.0 for p in parts.groups())
            seconds = h * 3600 + m * 60 + s
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise ValueError("must be a finite duration")
    return None if seconds < 0 else seconds


@dataclass(frozen=True)
class Budget:
    """The memory the fleet may fill: each device's free memory when the server started,
    the CPU's capped at ``max_memory`` bytes where given."""

    devices: tuple[Device, ...]

    @classmethod
    def detect(cls, max_memory: int | None = None) -> Budget:
        from localspec import devices

        found = devices.detect()
        if max_memory is not None:
            found = [replace(d, free_bytes=min(d.free_bytes, max_memory)) if d.kind == "cpu" else d for d in found]
        return cls(tuple(found))

    def left(self, used: dict[str, int]) -> list[Device]:
        return [replace(d, free_bytes=max(0, d.free_bytes - used.get(d.name, 0))) for d in self.devices]


class Fleet:
    """The servable models, and the loaded ones within ``budget`` and ``max_models``."""

    def __init__(self, servables: list[Servable], *, budget: Budget, max_models: int | None = None,
                 keep_alive: float | None = 300.0, pull: bool = False, offline: bool = False,
                 restricted: bool = False, default: str | None = None,
                 catalogue: Callable[[], list[Servable]] | None = None,
                 make: Callable[[str], Settings] | None = None, on_load: Callable[[Any], None] | None = None, note: Callable[[str], None] = lambda _: None) -> None:
        self.budget, self.max_models, self.keep_alive = budget, max_models, keep_alive
        self.pull, self.offline, self.restricted = pull, offline, restricted
        self.default = default
        self._catalogue = catalogue  # a fresh list of servables (the cache may change while serving)
        self._make = make  # settings for a model named by a request alone (a Hub name)
        self._servables = list(servables)
        self._on_load = on_load or (lambda _: None)
        self._note = note
        self._loaded: dict[str, Loaded] = {}
        self._lock = threading.Lock()  # the two dicts and every Loaded's holds
        self._loading = threading.Lock()  # one load (and its evictions) at a time
        self._failed: dict[str, tuple[tuple, LocalspecError]] = {}  # id -> (files' stamp, why)
        self._closed = threading.Event()
        self._sweeper = threading.Thread(target=self._sweep, name="localspec-keep-alive", daemon=True)
        self._sweeper.start()

    # ------------------------------------------------------------------ names

    def servables(self) -> list[Servable]:
        """Every model the fleet can serve (the catalogue read again), loaded ones included."""
        if self._catalogue is not None and not self.restricted:
            fresh = self._catalogue()
            with self._lock:
                known = {s.id for s in fresh}
                extra = [s for s in self._servables if s.id not in known]
                self._servables = fresh + extra
        with self._lock:
            return list(self._servables)

    def find(self, name: str | None) -> Servable:
        """The servable a request's ``model`` names (None: the default), or ModelNotFound."""
        if not name:
            if self.default is None:
                raise ModelNotFound("This server serves several models: name one in 'model' (see /v1/models).")
            name = self.default
        for servables in (self._snapshot(), self.servables()):
            for s in servables:
                if name == s.id or name in s.names:
                    return s
            for s in servables:
                if name.lower() == s.id.lower() or name.lower() in (n.lower() for n in s.names):
                    return s
        return self._from_hub(name)

    def _snapshot(self) -> list[Servable]:
        with self._lock:
            return list(self._servables)

    def _from_hub(self, name: str) -> Servable:
        """A Hub name not listed: the cached file it means, or (with --pull) a download."""
        from localspec.resolve import looks_like_hub

        if self.restricted or self._make is None or not looks_like_hub(name):
            raise ModelNotFound(f"The model '{name}' does not exist here; /v1/models lists what this server serves.")
        try:
            path: Path | None = _cached(name)
        except NotInCache:
            if not self.pull:
                raise ModelNotFound(f"The model '{name}' is not in the Hugging Face cache; pull it first "
                                    f"(localspec pull {name}), or start the server with --pull.") from None
            path = None
        except LocalspecError as exc:
            raise ModelNotFound(f"The model '{name}' cannot be served: {exc.message}") from None
        for s in self._snapshot():
            if path is not None and Path(s.settings.model or "") == path:
                return s
        servable = Servable(name, (), self._make(str(path) if path else name), download=path is None)
        with self._lock:
            self._servables.append(servable)
        return servable

    # ------------------------------------------------------------------ leases

    def acquire(self, name: str | None, keep_alive: float | None | str = "default") -> Lease:
        """The named model, loaded (waiting for a load under way), held until released."""
        servable = self.find(name)
        while True:
            with self._lock:
                if self._closed.is_set():
                    raise Unavailable("The server is shutting down.", retry=False)
                loaded = self._loaded.get(servable.id)
                if loaded is None:
                    loaded = self._loaded[servable.id] = Loaded(servable, holds=1, keep_alive=self.keep_alive)
                    mine = True
                else:
                    loaded.holds += 1
                    mine = False
            if mine:
                self._load(loaded)
            else:
                loaded.ready.wait()
            if loaded.engine is not None:
                if keep_alive != "default":
                    loaded.keep_alive = keep_alive  # type: ignore[assignment]
                return Lease(self, loaded)
            with self._lock:
                loaded.holds -= 1
            if loaded.error is not None:
                raise loaded.error
            # unloaded between its load and our wake-up: load it again

    def _release(self, loaded: Loaded, keep_alive: Any) -> None:
        if keep_alive != "default":
            loaded.keep_alive = keep_alive
        with self._lock:
            loaded.holds -= 1
            loaded.last_used = time.monotonic()
            now_idle = loaded.holds == 0 and loaded.keep_alive == 0
        if now_idle:
            self._unload(loaded, "keep_alive 0")

    # ------------------------------------------------------------------ loading

    def _load(self, loaded: Loaded) -> None:
        """Resolve, plan, make room and load; a failure is kept on ``loaded.error`` for
        every waiter, and the entry goes so that a later request tries again."""
        s = loaded.servable
        try:
            with self._loading:
                files = self._files(s)
                stamp = _stamp(files)
                failed = self._failed.get(s.id)
                if failed is not None and failed[0] == stamp:
                    raise failed[1]
                loaded.files = files
                loaded.plan = self._room_for(s, files)
                self._note(f"loading {s.id} ({files.model.name}"
                           + (f", draft {files.draft.name})" if files.draft else ")"))
                try:
                    engine = open_files(s.settings, files, loaded.plan, note=self._note)
                except (ModelLoadError, OutOfMemory, LocalspecError) as exc:
                    self._failed[s.id] = (stamp, exc)
                    raise
                self._failed.pop(s.id, None)
                self._on_load(engine)
                loaded.engine = engine
                self._note(f"loaded {s.id} in {engine.load_s:.1f} s")
        except LocalspecError as exc:
            loaded.error = exc
        except Exception as exc:  # a bug: still one sentence for this request, and the others go on
            loaded.error = ModelLoadError(f"The model '{s.id}' could not be loaded: {exc!r}.")
        finally:
            if loaded.engine is None:
                with self._lock:
                    if self._loaded.get(s.id) is loaded:
                        del self._loaded[s.id]
            loaded.ready.set()

    def _files(self, s: Servable) -> Files:
        """The servable's files; a draft that is not here (and may not be downloaded)
        leaves n-gram drafting alone, a target that is not here is a 404."""
        offline = self.offline or not s.download
        try:
            return resolve_files(s.settings, offline=offline, progress=self._progress, note=self._note)
        except (NotInCache, ModelNotFound) as exc:
            try:
                target = resolve_files(replace_settings(s.settings, draft=None), offline=offline,
                                       progress=self._progress)
            except (NotInCache, ModelNotFound):
                raise ModelNotFound(f"The model '{s.id}' is not here any more: {exc.message}") from None
            self._note(f"{s.id}: its draft is not here ({exc.message}); drafting with n-gram lookup alone")
            return target

    def _room_for(self, s: Servable, files: Files) -> Plan:
        """The plan to load with, after unloading least recently used idle models until
        the model fits beside the others as it would alone (or nothing more can go)."""
        try:
            alone = plan_files(s.settings, files, list(self.budget.devices))
        except OutOfMemory as exc:
            raise Unavailable(f"The model '{s.id}' does not fit in this server's memory budget even alone: "
                              f"{exc.message}", retry=False) from None
        while True:
            with self._lock:
                others = [m for m in self._loaded.values() if m.engine is not None]
            used: dict[str, int] = {}
            for m in others:
                for name, n in m.planned().items():
                    used[name] = used.get(name, 0) + n
            fits, beside = self._fits(s, files, alone, used)
            count_ok = self.max_models is None or len(others) < self.max_models
            if fits and count_ok:
                return beside  # type: ignore[return-value]
            victim = self._least_recently_used()
            if victim is None:
                if count_ok and beside is not None:
                    return beside  # fewer GPU layers than alone, but it runs
                held = ", ".join(m.servable.id for m in others)
                why = f"--max-models {self.max_models}" if not count_ok else \
                    f"memory ({_gib(alone)} GiB needed)"
                raise Unavailable(f"The model '{s.id}' cannot be loaded now: {why} is taken by models with "
                                  f"requests in flight ({held}); retry shortly.")
            self._unload(victim, f"to make room for {s.id}")

    def _fits(self, s: Servable, files: Files, alone: Plan, used: dict[str, int]) -> tuple[bool, Plan | None]:
        try:
            beside = plan_files(s.settings, files, self.budget.left(used))
        except OutOfMemory:
            return False, None
        same = (beside.target.gpu_layers, beside.ctx_size, beside.draft and beside.draft.gpu_layers) == \
            (alone.target.gpu_layers, alone.ctx_size, alone.draft and alone.draft.gpu_layers)
        return same, beside

    def _least_recently_used(self) -> Loaded | None:
        with self._lock:
            idle = [m for m in self._loaded.values() if m.engine is not None and m.holds == 0]
        return min(idle, key=lambda m: m.last_used, default=None)

    def _unload(self, loaded: Loaded, why: str) -> None:
        """Close an idle model's engine (no-op if it got a request meanwhile)."""
        with self._lock:
            if loaded.holds or self._loaded.get(loaded.servable.id) is not loaded or loaded.engine is None:
                return
            del self._loaded[loaded.servable.id]
        engine, loaded.engine = loaded.engine, None
        engine.close()
        self._note(f"unloaded {loaded.servable.id} ({why})")

    def _progress(self, file: str, done: int, total: int | None) -> None:
        if total and done >= total:
            self._note(f"downloaded {file} ({total / GiB:.2f} GiB)")

    # ------------------------------------------------------------------ keep-alive, status

    def _sweep(self) -> None:
        while not self._closed.wait(SWEEP_S):
            now = time.monotonic()
            with self._lock:
                due = [m for m in self._loaded.values() if m.engine is not None and m.holds == 0
                       and m.keep_alive is not None and now - m.last_used >= m.keep_alive]
            for m in due:
                self._unload(m, "idle")

    def loaded(self) -> list[Loaded]:
        with self._lock:
            return [m for m in self._loaded.values() if m.engine is not None]

    def state_of(self, servable_id: str) -> Loaded | None:
        with self._lock:
            m = self._loaded.get(servable_id)
        return m if m is not None and m.engine is not None else None

    def close(self) -> None:
        """Unload everything (requests still running are cancelled by their engines)."""
        self._closed.set()
        with self._lock:
            models = list(self._loaded.values())
            self._loaded.clear()
        for m in models:
            m.ready.wait()
            if m.engine is not None:
                m.engine.close()
                m.engine = None


def local_servables(make: Callable[[str], Settings], *, pull: bool = False,
                    note: Callable[[str], None] = lambda _: None) -> list[Servable]:
    """What a server with no model named serves: every profile whose model is here (all
    of them with ``pull``), every GGUF in the Hugging Face cache, and the embedded model."""
    from localspec import profiles
    from localspec.resolve import looks_like_hub
    from localspec.resolve.cache import cached_models
    from localspec.resolve.local import embedded_model

    out: dict[str, Servable] = {}
    for pf in profiles.available():
        try:
            settings = make(pf.name)
            if not pull and settings.model and looks_like_hub(settings.model):
                _cached(settings.model)
        except LocalspecError as exc:
            if pull or not isinstance(exc, NotInCache):
                note(f"profile {pf.name} is not served: {exc.message}")
            continue
        out[pf.name] = Servable(pf.name, (), settings, download=pull)
    for m in cached_models():
        path = m.files[0]
        if m.name in out:
            continue
        try:
            out[m.name] = Servable(m.name, (path.name, path.name.removesuffix(".gguf")), make(str(path)))
        except LocalspecError as exc:
            note(f"{m.name} is not served: {exc.message}")
    embedded = embedded_model()
    if embedded is not None:
        name = embedded.name.removesuffix(".gguf")
        out.setdefault(name, Servable(name, (embedded.name,), make(str(embedded))))
    return list(out.values())


def _cached(name: str) -> Path:
    """The cached file of a Hub name, or NotInCache."""
    from localspec.resolve import Hub, parse_hub

    return Hub.from_env(offline=True).resolve(parse_hub(name), download=False).path


def replace_settings(s: Settings, **values: Any) -> Settings:
    return updated(s, values, "server")


def _stamp(files: Files) -> tuple:
    out = []
    for path in (files.model, files.draft):
        if path is not None:
            st = path.stat()
            out.append((str(path), st.st_size, st.st_mtime_ns))
    return tuple(out)


def _gib(p: Plan) -> str:
    return f"{sum(d.planned_bytes for d in p.devices) / GiB:.1f}"
