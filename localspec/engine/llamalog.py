"""llama.cpp's log, kept quietly: the lines behind a failure (shown under --verbose) and
the buffer sizes it reports (what the memory planner is checked against).

``backend`` installs the callback that feeds ``record``; this module is plain Python.
"""

from __future__ import annotations

import collections
import sys

_lines: collections.deque[str] = collections.deque(maxlen=600)
_verbose = False


def record(level: int, line: str) -> None:
    # debug lines and the per-tensor graph dump (hundreds per context) would push out
    # the lines that matter (buffer sizes, errors)
    if level != 4 and not line.startswith("llama_graph_n_input_tensors"):
        _lines.append(line)
    if _verbose:
        sys.stderr.write(line)
        sys.stderr.flush()


def set_verbose(verbose: bool) -> None:
    """Show llama.cpp's own log on stderr (it is kept quietly otherwise)."""
    global _verbose
    _verbose = verbose


def clear() -> None:
    _lines.clear()


def recent(lines: int = 30) -> str:
    """llama.cpp's last log lines: the detail behind a failure, shown under --verbose."""
    return "".join(list(_lines)[-lines:]).strip()


def reported_bytes(pattern: str) -> int:
    """Sum of the ``... <pattern> = X MiB`` sizes llama.cpp logged since the last clear."""
    total = 0.0
    for line in _lines:
        if pattern in line and "=" in line:
            try:
                total += float(line.split("=")[1].split("MiB")[0])
            except ValueError:
                continue
    return int(total * (1 << 20))
