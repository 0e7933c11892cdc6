"""The devices this llama.cpp build can use, with their free memory (not pure: asks ggml
and the OS; plan.py then works on the plain numbers). ggml's backend-device API is not
bound by llama-cpp-python, so it is called here through ctypes on the library that
``backend.ggml_library`` finds."""

from __future__ import annotations

import ctypes
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
    found = []
    for name, desc, kind, free, total in probe():
        if kind == "cpu":
            ram = available_ram()
            found.append(Device(desc or name, "cpu", ram, max(total, ram)))
        elif gpu_memory is None:
            found.append(Device(f"{name} ({desc})" if desc else name, kind, free, total))
    if gpu_memory is not None:
        found.append(Device(f"planned GPU ({gpu_memory / (1 << 30):.1f} GiB)", "gpu", gpu_memory, gpu_memory))
    return found


_DEVICE_KINDS = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}


def _ggml() -> ctypes.CDLL:
    from localspec.engine import backend

    path = backend.ggml_library()
    lib = ctypes.CDLL(str(path) if path else "libggml.so")
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_dev_get.restype = ctypes.c_void_p
    lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    for fn in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
        getattr(lib, fn).restype = ctypes.c_char_p
        getattr(lib, fn).argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_memory.argtypes = [
        ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
    lib.ggml_backend_dev_type.restype = ctypes.c_int
    lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_reg_count.restype = ctypes.c_size_t
    lib.ggml_backend_reg_get.restype = ctypes.c_void_p
    lib.ggml_backend_reg_get.argtypes = [ctypes.c_size_t]
    lib.ggml_backend_reg_name.restype = ctypes.c_char_p
    lib.ggml_backend_reg_name.argtypes = [ctypes.c_void_p]
    return lib


def probe() -> list[tuple[str, str, str, int, int]]:
    """(name, description, kind, free bytes, total bytes) of every device this build sees."""
    lib = _ggml()
    out = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        out.append((
            (lib.ggml_backend_dev_name(dev) or b"?").decode(),
            (lib.ggml_backend_dev_description(dev) or b"").decode(errors="replace"),
            _DEVICE_KINDS.get(lib.ggml_backend_dev_type(dev), "other"),
            int(free.value),
            int(total.value),
        ))
    return out


def backends() -> list[str]:
    """The ggml backends compiled into this build (CPU, CUDA, Metal, ...)."""
    lib = _ggml()
    return [(lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i)) or b"?").decode()
            for i in range(lib.ggml_backend_reg_count())]
