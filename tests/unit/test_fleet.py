"""The fleet of a model server, on real tiny GGUFs: one load per model however many ask,
a held model never unloaded, the least recently used idle one unloaded to make room,
keep-alive, and a model that fails to load failing alone."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from localspec.errors import LocalspecError, ModelNotFound
from localspec.fleet import Budget, Fleet, Servable, Unavailable, parse_keep_alive
from localspec.loader import Files, plan_files
from localspec.plan import Device
from localspec.settings import Settings

def settings(path: Path) -> Settings:
    return Settings(model=str(path), draft=None, ctx_size=256, slots=1, spec="off", threads=1)


def servable(path: Path, name: str) -> Servable:
    return Servable(name, (path.name,), settings(path))


def planned(path: Path) -> int:
    s = settings(path)
    return sum(d.planned_bytes for d in plan_files(s, Files(path, None), [Device("cpu", "cpu", 1 << 40, 1 << 40)]).devices)


def budget(free: int) -> Budget:
    return Budget((Device("cpu", "cpu", free, free),))


class Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append(line)

    def count(self, start: str) -> int:
        return sum(line.startswith(start) for line in self.lines)


@pytest.fixture()
def models(tiny_model: Path, tiny_model_no_template: Path, tmp_path: Path) -> dict[str, Path]:
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    shutil.copy(tiny_model, a)
    shutil.copy(tiny_model_no_template, b)
    return {"a": a, "b": b}


def fleet_of(models: dict[str, Path], log: Log, **kw) -> Fleet:
    kw.setdefault("budget", budget(1 << 40))
    return Fleet([servable(p, n) for n, p in models.items()], restricted=True, note=log, **kw)


@pytest.mark.parametrize("text,seconds", [
    ("5m", 300.0), ("30s", 30.0), ("1h30m", 5400.0), ("0", 0.0), (0, 0.0), (2.5, 2.5), ("-1", None), (-1, None),
    ("1.5h", 5400.0), (" 10S ", 10.0),
])
def test_keep_alive_durations(text, seconds) -> None:
    assert parse_keep_alive(text) == seconds


@pytest.mark.parametrize("bad", ["", "soon", "5 minutes", "m", True, float("nan"), "inf"])
def test_bad_keep_alive_is_refused(bad) -> None:
    with pytest.raises(ValueError):
        parse_keep_alive(bad)


def test_concurrent_first_requests_load_once(models) -> None:
    log = Log()
    fleet = fleet_of(models, log)
    try:
        leases, errors = [], []

        def ask() -> None:
            try:
                leases.append(fleet.acquire("a"))
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=ask) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors
        assert len(leases) == 6 and len({id(lease.engine) for lease in leases}) == 1
        assert log.count("loading a") == 1
        assert fleet.state_of("a").holds == 6
        for lease in leases:
            lease.release()
            lease.release()  # a second release is a no-op
        assert fleet.state_of("a").holds == 0
    finally:
        fleet.close()


def test_names_resolve_as_given_and_unknown_is_not_found(models) -> None:
    fleet = fleet_of(models, Log(), default="a")
    try:
        assert fleet.find("b.gguf").id == "b"
        assert fleet.find("A").id == "a"
        assert fleet.find(None).id == "a"
        with pytest.raises(ModelNotFound):
            fleet.find("nothing-like-it")
    finally:
        fleet.close()


def test_least_recently_used_idle_model_makes_room(models) -> None:
    need = max(planned(models["a"]), planned(models["b"]))
    log = Log()
    fleet = fleet_of(models, log, budget=budget(need + need // 2))  # one fits, not two
    try:
        fleet.acquire("a").release()
        assert [m.servable.id for m in fleet.loaded()] == ["a"]
        lease = fleet.acquire("b")
        assert [m.servable.id for m in fleet.loaded()] == ["b"]
        assert "unloaded a (to make room for b)" in log.lines
        # a model with a request in flight is never unloaded: the other waits with a 503
        with pytest.raises(Unavailable) as caught:
            fleet.acquire("a")
        assert caught.value.retry and caught.value.http_status == 503
        assert fleet.state_of("b") is not None and lease.engine is not None
        lease.release()
        fleet.acquire("a").release()
        assert [m.servable.id for m in fleet.loaded()] == ["a"]
    finally:
        fleet.close()


def test_both_load_where_both_fit(models) -> None:
    need = planned(models["a"]) + planned(models["b"])
    fleet = fleet_of(models, Log(), budget=budget(need + (8 << 20)))
    try:
        fleet.acquire("a").release()
        fleet.acquire("b").release()
        assert sorted(m.servable.id for m in fleet.loaded()) == ["a", "b"]
    finally:
        fleet.close()


def test_max_models_caps_the_count(models) -> None:
    log = Log()
    fleet = fleet_of(models, log, max_models=1)
    try:
        fleet.acquire("a").release()
        held = fleet.acquire("b")
        assert [m.servable.id for m in fleet.loaded()] == ["b"]
        with pytest.raises(Unavailable, match="--max-models 1"):
            fleet.acquire("a")
        held.release()
    finally:
        fleet.close()


def test_a_model_too_big_even_alone_is_not_retried(models) -> None:
    fleet = fleet_of(models, Log(), budget=budget(planned(models["a"]) // 4))
    try:
        with pytest.raises(Unavailable) as caught:
            fleet.acquire("a")
        assert not caught.value.retry
        assert fleet.loaded() == []
    finally:
        fleet.close()


def test_keep_alive_unloads_idle_models(models) -> None:
    log = Log()
    fleet = fleet_of(models, log, keep_alive=0.3)
    try:
        lease = fleet.acquire("a")
        time.sleep(1.0)
        assert fleet.state_of("a") is not None  # held: the clock has not started
        lease.release()
        deadline = time.monotonic() + 10
        while fleet.state_of("a") is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert fleet.state_of("a") is None
        assert "unloaded a (idle)" in log.lines
        # keep_alive 0 on a request: unloaded the moment it ends; -1 (None): kept
        fleet.acquire("b", keep_alive=None).release(keep_alive=0)
        assert fleet.state_of("b") is None
        fleet.acquire("b", keep_alive=None).release()
        time.sleep(1.0)
        assert fleet.state_of("b") is not None
    finally:
        fleet.close()


def test_a_corrupt_model_fails_alone_and_is_not_reloaded(models, tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    data = models["a"].read_bytes()
    broken.write_bytes(data[: len(data) // 2])
    log = Log()
    fleet = Fleet([servable(models["a"], "a"), servable(broken, "broken")], budget=budget(1 << 40),
                  restricted=True, note=log)
    try:
        with pytest.raises(LocalspecError) as first:
            fleet.acquire("broken")
        assert "broken" in str(first.value) or "truncat" in str(first.value).lower()
        with pytest.raises(LocalspecError):
            fleet.acquire("broken")
        assert log.count("loading broken") <= 1
        assert fleet.acquire("a").engine is not None
        # the file mended: tried again
        broken.write_bytes(data)
        lease = fleet.acquire("broken")
        assert lease.engine is not None
        lease.release()
    finally:
        fleet.close()


def test_a_model_deleted_while_listed_is_not_found(models) -> None:
    fleet = fleet_of(models, Log())
    try:
        models["b"].unlink()
        with pytest.raises(ModelNotFound):
            fleet.acquire("b")
        fleet.acquire("a").release()
    finally:
        fleet.close()
