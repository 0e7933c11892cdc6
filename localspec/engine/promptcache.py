"""Prompt state on disk: the KV cache of long prompts, kept across processes.

On a CPU the prefill of a long prompt is the wait a user feels, and ``run``, ``chat``,
``batch`` and a restarted ``serve`` would pay it each time the same text comes back. So
after a sequence holds at least ``MIN_TOKENS`` tokens that no saved state covers (a
prompt just prefilled, or a prompt and its answer), its state (llama.cpp's sequence
state, ``llama_state_seq_get_data``) is written here; a later request whose prompt
shares a leading part with a saved one loads that state into its sequence, cuts it to
the shared part (positions past it are simply removed: the KV of a prefix does not
depend on what follows it) and prefills only the rest.

One file per entry, under a folder per model file name and owner (the API key's id:
one key never loads another's prompts). A file is

    MAGIC | u32 header length | header (JSON) | tokens (int32) | state

where the header holds the identity the state depends on (the model file's size and a
hash of its header and tail, llama.cpp's version, the KV type, the context options),
the token count and a CRC-32 of tokens and state. A file whose header, identity or
checksum does not match is removed and the prompt is prefilled: the cache never fails
a request. Files are written to a temporary name and renamed, so a full disk, a crash
or two processes writing one entry leave whole files or none. The folder is kept under
its size, the least recently used entries (file mtime, touched on each load) removed
first; an entry whose tokens are a prefix of a newer one's is removed as covered.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import struct
import tempfile
import threading
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger("localspec.prompt_cache")

MAGIC = b"LSPROMPT"
VERSION = 1
#: Below this many tokens a prompt is prefilled, not saved or loaded: on SmolLM2-135M
#: here 512 tokens prefill in ~0.35 s, and their 11 MiB load in ~0.02 s, but a file for
#: every short prompt would fill the cache with states nobody asks for twice.
MIN_TOKENS = 512
#: A state is saved only when it extends the longest one saved for it by this many
#: tokens (the "steps" of the prompt): batches sharing a preamble and chat turns do not
#: write a new file for every few tokens they add.
STEP_TOKENS = 256
#: A slot starts from another slot's prefix, or a saved one, only when it is longer than
#: its own by this many tokens: below that, prefilling them costs about what reading a
#: state does.
MIN_GAIN = 32
DEFAULT_SIZE = 4 << 30
#: Writes waiting for the writer thread, at most (more are dropped, not queued).
MAX_PENDING_BYTES = 1 << 30
_HEAD = struct.Struct("<8sI")


def default_dir() -> Path:
    import platformdirs

    if os.environ.get("LOCALSPEC_PROMPT_CACHE_DIR"):
        return Path(os.environ["LOCALSPEC_PROMPT_CACHE_DIR"])
    return Path(os.environ.get("LOCALSPEC_CACHE_DIR") or platformdirs.user_cache_dir("localspec")) / "prompts"


def disabled_by_env() -> bool:
    return os.environ.get("LOCALSPEC_NO_PROMPT_CACHE", "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Identity:
    """What a saved state depends on: every field must match for it to be loaded."""

    model: str  # the file's name
    size: int
    digest: str  # sha256 of the file's first 4 MiB (the GGUF header) and last MiB
    build: str  # llama-cpp-python's version (its llama.cpp)
    kv_type: str
    options: str  # context options that change the state (flash attention, offload)

    @classmethod
    def of(cls, path: Path, build: str, kv_type: str, options: str = "") -> Identity:
        size = path.stat().st_size
        h = hashlib.sha256()
        with path.open("rb") as f:
            h.update(f.read(4 << 20))
            if size > 5 << 20:
                f.seek(size - (1 << 20))
                h.update(f.read())
        return cls(path.name, size, h.hexdigest(), build, kv_type, options)


@dataclass(frozen=True)
class Hit:
    """A saved state whose tokens share ``n`` leading tokens with a prompt."""

    path: Path
    n: int


@dataclass
class _Entry:
    tokens: np.ndarray
    mtime_ns: int
    size: int


class PromptCache:
    """The saved states of one model (its ``Identity``) in a folder bounded by ``limit``
    bytes. ``lookup`` and ``read`` run in any thread; ``save`` hands the bytes to a
    writer thread of its own; ``close`` waits for the writes."""

    def __init__(self, root: Path, identity: Identity, limit: int = DEFAULT_SIZE) -> None:
        self.root, self.identity, self.limit = Path(root), identity, limit
        self._index: dict[Path, _Entry] = {}
        self._lock = threading.RLock()
        self._writes: queue.SimpleQueue[tuple[str, np.ndarray, bytearray] | threading.Event | None] = queue.SimpleQueue()
        self._pending = 0
        self._queued: list[tuple[str, np.ndarray]] = []  # written soon: they count as covered
        self._refused: set[Path] = set()  # llama.cpp would not load these (in this process)
        self._writer: threading.Thread | None = None
        self.saved = self.loaded = self.rejected = 0  # counts, for tests and --verbose

    # ------------------------------------------------------------------ finding

    def folder(self, owner: str = "") -> Path:
        name = hashlib.sha256(f"{self.identity.model}\0{owner}".encode()).hexdigest()[:24]
        return self.root / name

    def lookup(self, tokens: list[int], owner: str = "") -> Hit | None:
        """The saved state sharing the longest leading part with ``tokens`` (at least
        MIN_TOKENS of it), or None."""
        if len(tokens) < MIN_TOKENS:
            return None
        want = np.asarray(tokens, dtype=np.int32)
        best: Hit | None = None
        for path, entry in self._scan(self.folder(owner)).items():
            if path in self._refused:
                continue
            n = _common(want, entry.tokens)
            if n >= MIN_TOKENS and (best is None or n > best.n):
                best = Hit(path, n)
        return best

    def covered(self, tokens: list[int], owner: str = "") -> int:
        """How many leading tokens of ``tokens`` the saved states already cover."""
        want = np.asarray(tokens, dtype=np.int32)
        with self._lock:
            queued = [t for o, t in self._queued if o == owner]
        saved = [e.tokens for e in self._scan(self.folder(owner)).values()]
        return max((_common(want, t) for t in saved + queued), default=0)

    def wants(self, tokens: list[int], owner: str = "", step: int = STEP_TOKENS) -> bool:
        """Whether a state of ``tokens`` is worth writing: long, and at least ``step``
        tokens past what the saved states cover."""
        return len(tokens) >= MIN_TOKENS and len(tokens) - self.covered(tokens, owner) >= step

    def _scan(self, folder: Path) -> dict[Path, _Entry]:
        """The folder's entries (their tokens read once per file and kept), dropping
        files that are gone and removing those that are not ours."""
        try:
            files = {Path(e.path): e.stat() for e in os.scandir(folder) if e.name.endswith(".state")}
        except OSError:
            return {}
        out = {}
        with self._lock:
            for path, st in files.items():
                entry = self._index.get(path)
                if entry is None or entry.size != st.st_size:
                    tokens = self._read_tokens(path)
                    if tokens is None:
                        continue
                    entry = self._index[path] = _Entry(tokens, st.st_mtime_ns, st.st_size)
                out[path] = entry
            for path in [p for p in self._index if p.parent == folder and p not in files]:
                del self._index[path]
        return out

    def _read_tokens(self, path: Path) -> np.ndarray | None:
        try:
            with path.open("rb") as f:
                header = self._header(f, path)
                if header is None:
                    return None
                raw = f.read(4 * header["n_tokens"])
            if len(raw) != 4 * header["n_tokens"]:
                return self._reject(path, "it is truncated")
            return np.frombuffer(raw, dtype=np.int32)
        except OSError:
            return None

    def _header(self, f, path: Path) -> dict | None:
        head = f.read(_HEAD.size)
        if len(head) < _HEAD.size:
            return self._reject(path, "it is truncated")
        magic, length = _HEAD.unpack(head)
        if magic != MAGIC or length > 1 << 20:
            return self._reject(path, "it is not a localspec prompt state")
        try:
            header = json.loads(f.read(length))
            if header["version"] != VERSION:
                return self._reject(path, f"it has format {header['version']}, not {VERSION}")
            if header["identity"] != asdict(self.identity):
                return self._reject(path, "it is from another model file, llama.cpp build or KV type")
            int(header["n_tokens"]), int(header["state_bytes"]), int(header["crc32"])
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            return self._reject(path, "its header is damaged")
        return header

    def _reject(self, path: Path, why: str) -> None:
        """Remove a file that must not be loaded, with a note for --verbose."""
        self.rejected += 1
        log.info("prompt cache: removed %s: %s", path.name, why)
        try:
            path.unlink()
        except OSError:
            pass
        with self._lock:
            self._index.pop(path, None)
        return None

    # ------------------------------------------------------------------ loading

    def read(self, hit: Hit) -> bytearray | None:
        """The state of ``hit``, checked whole (None, and the file removed, when it is
        not); the file counts as just used."""
        path = hit.path
        try:
            with path.open("rb") as f:
                header = self._header(f, path)
                if header is None:
                    return None
                n, size = header["n_tokens"], header["state_bytes"]
                tokens = f.read(4 * n)
                state = bytearray(size)
                got = f.readinto(state)
                extra = f.read(1)
        except OSError as exc:
            log.info("prompt cache: cannot read %s: %s", path.name, exc.strerror)
            return None
        if len(tokens) != 4 * n or got != size or extra:
            return self._reject(path, "its length is not the one its header gives")
        if zlib.crc32(state, zlib.crc32(tokens)) != header["crc32"]:
            return self._reject(path, "its checksum does not match")
        try:
            os.utime(path)
        except OSError:
            pass
        self.loaded += 1
        return state

    def refused(self, hit: Hit) -> None:
        """llama.cpp refused a state that passed every check here (most likely no room
        for it in this context's cache): not offered again in this process."""
        log.info("prompt cache: llama.cpp could not load %s; prefilling instead", hit.path.name)
        self._refused.add(hit.path)

    # ------------------------------------------------------------------ saving

    def save(self, tokens: list[int], state: bytearray, owner: str = "") -> bool:
        """Queue ``state`` (the KV of ``tokens``) to be written; False when it is not
        (too big for the cache, or too much is waiting already)."""
        size = len(state) + 4 * len(tokens) + 1024
        if size > self.limit:
            return False
        with self._lock:
            if self._pending + size > MAX_PENDING_BYTES:
                log.info("prompt cache: a state of %d tokens not saved: the writes waiting are too big", len(tokens))
                return False
            self._pending += size
            ids = np.asarray(tokens, dtype=np.int32)
            self._queued.append((owner, ids))
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_all, name="localspec-prompt-cache", daemon=True)
                self._writer.start()
        self._writes.put((owner, ids, state))
        return True

    def flush(self) -> None:
        """Wait for the writes queued so far."""
        with self._lock:
            writer = self._writer
        if writer is not None:
            done = threading.Event()
            self._writes.put(done)
            done.wait()

    def close(self) -> None:
        """Wait for the queued writes (a ``run`` ends only once its prompt is kept)."""
        with self._lock:
            writer = self._writer
            self._writer = None
        if writer is not None:
            self._writes.put(None)
            writer.join()

    def _write_all(self) -> None:
        while (item := self._writes.get()) is not None:
            if isinstance(item, threading.Event):  # flush(): all before it is written
                item.set()
                continue
            owner, tokens, state = item
            try:
                self._write(self.folder(owner), tokens, state)
            except OSError as exc:  # a full disk, a read-only folder: the cache stays as it was
                log.info("prompt cache: cannot save a prompt state: %s", exc.strerror or exc)
            except Exception as exc:  # pragma: no cover - never let a write end the writer
                log.info("prompt cache: cannot save a prompt state: %r", exc)
            finally:
                with self._lock:
                    self._pending -= len(state) + 4 * len(tokens) + 1024
                    self._queued = [q for q in self._queued if q[1] is not tokens]

    def _write(self, folder: Path, tokens: np.ndarray, state: bytearray) -> None:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)  # prompts are private
        raw = tokens.tobytes()
        header = json.dumps({"version": VERSION, "identity": asdict(self.identity), "n_tokens": len(tokens),
                             "state_bytes": len(state), "crc32": zlib.crc32(state, zlib.crc32(raw)),
                             "saved_at": time.time()}).encode()
        name = hashlib.sha256(raw).hexdigest()[:32] + ".state"
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_HEAD.pack(MAGIC, len(header)))
                f.write(header)
                f.write(raw)
                f.write(state)
            os.replace(tmp, folder / name)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        self.saved += 1
        log.info("prompt cache: saved the state of %d tokens (%.1f MiB)", len(tokens), len(state) / (1 << 20))
        for path, entry in self._scan(folder).items():  # states this one covers
            if path.name != name and len(entry.tokens) <= len(tokens) and _common(tokens, entry.tokens) == len(entry.tokens):
                _unlink(path)
        evict(self.root, self.limit)


def evict(root: Path, limit: int) -> None:
    """Remove the least recently used entries until the folder holds at most ``limit``
    bytes (and temporary files a crashed writer left, after an hour)."""
    files = []
    now = time.time()
    try:
        folders = [Path(e.path) for e in os.scandir(root) if e.is_dir()]
    except OSError:
        return
    for folder in folders:
        try:
            for e in os.scandir(folder):
                st = e.stat()
                if e.name.endswith(".state"):
                    files.append((st.st_mtime_ns, st.st_size, Path(e.path)))
                elif e.name.startswith(".tmp-") and now - st.st_mtime > 3600:
                    _unlink(Path(e.path))
        except OSError:
            continue
    total = sum(size for _, size, _ in files)
    for _, size, path in sorted(files):
        if total <= limit:
            break
        _unlink(path)
        total -= size


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _common(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n
