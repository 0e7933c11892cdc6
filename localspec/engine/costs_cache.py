"""Measured decode costs, remembered per model file, draft, threads and llama.cpp build,
so that only the first run on a machine pays the few seconds of calibration."""

from __future__ import annotations

import json
import os
from pathlib import Path

import platformdirs

from localspec.engine.speculate import Costs


MAX_ENTRIES = 64


def _path() -> Path:
    return Path(platformdirs.user_cache_dir("localspec")) / "costs.json"


def _file_id(path: Path | str | None) -> str:
    if path is None:
        return "-"
    st = Path(path).stat()
    return f"{Path(path).resolve()}:{st.st_size}:{int(st.st_mtime)}"


def key(model: Path | str, draft: Path | str | None, threads: int | None, kv_type: str) -> str:
    from localspec.engine import backend

    n = threads or backend.default_threads()
    return f"{_file_id(model)}|{_file_id(draft)}|t{n}|{kv_type}|llama-cpp-python {backend.library_version()}"


def load(k: str) -> Costs | None:
    if os.environ.get("LOCALSPEC_NO_COST_CACHE"):
        return None
    try:
        data = json.loads(_path().read_text())
        return Costs.from_dict(data[k]) if k in data else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save(k: str, costs: Costs) -> None:
    if os.environ.get("LOCALSPEC_NO_COST_CACHE"):
        return
    path = _path()
    try:
        data = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        data = {}
    data.pop(k, None)
    data[k] = costs.to_dict()
    data = dict(list(data.items())[-MAX_ENTRIES:])  # the most recently used models
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache only costs the next run its calibration
