"""The devices this llama.cpp build can use, with their free memory (not pure: asks ggml
and the OS; plan.py then works on the plain numbers)."""

from __future__ import annotations

import os
import re

from localspec.errors import InvalidRequest
from localspec.plan import Device

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'8GiB', '8G', '512MiB', '24GB' -> bytes (GB and GiB both taken as powers of 1024,
    as GPU vendors print them)."""
    m = _SIZE.match(text)
    if not m:
        raise InvalidRequest(f"Cannot read {text!r} as a size; write it like 8GiB or 512MiB.")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
    return int(float(m.group(1)) * scale)


def available_ram() -> int:
    """MemAvailable from /proc/meminfo (what can be used without swapping), else free RAM."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def detect(gpu_memory: int | None = None) -> list[Device]:
    """The devices llama.cpp sees; with ``gpu_memory``, one planned GPU of that size
    replaces the real ones (planning a deployment on hardware that is not here)."""
    from localspec.engine import backend

    found = []
    for name, desc, kind, free, total in backend.devices():
        if kind == "cpu":
            ram = available_ram()
            found.append(Device(desc or name, "cpu", ram, max(total, ram)))
        elif gpu_memory is None:
            found.append(Device(f"{name} ({desc})" if desc else name, kind, free, total))
    if gpu_memory is not None:
        found.append(Device(f"planned GPU ({gpu_memory / (1 << 30):.1f} GiB)", "gpu", gpu_memory, gpu_memory))
    return found
