"""The only module that imports ``llama_cpp``.

It wraps llama-cpp-python's low-level (ctypes) API, because the engine needs several
sequences in one context, per-sequence KV removal and logits for chosen batch rows, which
the high-level ``Llama`` class does not give. Everything it returns is plain Python or
numpy; every llama.cpp failure becomes a ``localspec.errors`` exception with a sentence.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

# llama.cpp's libraries load before numpy's: on the H200, a CUDA build loaded after
# numpy crashed in every model load (llama_model::print_info, a libstdc++ symbol resolved
# in libggml-cuda.so), and loaded first it loads; localspec.engine imports this module first.
try:
    import llama_cpp as lc
except Exception as exc:  # pragma: no cover - depends on the install
    from localspec.errors import LocalspecError

    raise LocalspecError(
        "llama-cpp-python is not installed or failed to load "
        f"({exc}); reinstall it as the README's install section says."
    ) from exc

import numpy as np  # noqa: E402  (after llama_cpp: see above)

from localspec.engine import llamalog
from localspec.errors import ContextError, DecodeError, ModelLoadError, OutOfMemory

# ---------------------------------------------------------------------------- logging

_init_lock = threading.Lock()
_initialised = False
set_verbose = llamalog.set_verbose


@lc.llama_log_callback
def _on_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    llamalog.record(level, text.decode("utf-8", errors="replace"))


def _init() -> None:
    global _initialised
    with _init_lock:
        if not _initialised:
            lc.llama_log_set(_on_log, ctypes.c_void_p(0))
            lc.llama_backend_init()
            _initialised = True


def supports_gpu_offload() -> bool:
    _init()
    return bool(lc.llama_supports_gpu_offload())


def llama_cpp_version() -> str:
    """llama-cpp-python's version, also where its package is used from a source tree
    (no installed distribution to ask, as on the GPU check's machine)."""
    return str(getattr(lc, "__version__", "unknown"))


def system_info() -> str:
    _init()
    return lc.llama_print_system_info().decode("utf-8", errors="replace").strip()


def builtin_templates() -> list[str]:
    """Names of the chat templates llama.cpp knows (chatml, llama3, gemma, ...)."""
    n = lc.llama_chat_builtin_templates(None, 0)
    arr = (ctypes.c_char_p * n)()
    lc.llama_chat_builtin_templates(arr, n)
    return [name.decode() for name in arr if name]


def ggml_library() -> Path | None:
    """libggml of llama-cpp-python's package (its backend-device API is not bound),
    after llama.cpp's backends are initialised: ``devices`` probes devices through it."""
    _init()
    lib_dir = Path(lc.__file__).parent / "lib"
    for name in ("libggml.so", "libggml.dylib", "ggml.dll"):
        if (lib_dir / name).exists():
            return lib_dir / name
    return None  # pragma: no cover - unusual layouts


def reference_decode_rate(path: Path, prompt: list[int], max_tokens: int, *, n_ctx: int, n_threads: int | None) -> float:
    """Plain greedy decode tokens/s through llama-cpp-python's high-level ``Llama`` on the
    same prompt tokens: the raw-llama.cpp yardstick that ``bench --vs-llama-cpp`` prints.

    It runs in a child process: this llama.cpp build uses OpenMP, whose worker threads
    belong to the calling thread and spin after each decode, so a second caller thread in
    the same process slows both (measured: 15.3 -> 11 tok/s here)."""
    import json
    import subprocess

    args = json.dumps({"path": str(path), "prompt": prompt, "max_tokens": max_tokens,
                       "n_ctx": n_ctx, "n_threads": n_threads})
    proc = subprocess.run(
        [sys.executable, "-m", "localspec.engine.backend"], input=args, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise DecodeError("The llama-cpp-python reference run failed.", detail=proc.stderr[-2000:])
    return float(proc.stdout.strip().splitlines()[-1])


def _reference_in_process(path: Path, prompt: list[int], max_tokens: int, n_ctx: int, n_threads: int | None) -> float:
    import time

    _init()
    llm = lc.Llama(
        model_path=str(path), n_ctx=n_ctx, n_threads=n_threads or default_threads(),
        n_threads_batch=n_threads or default_threads(), verbose=False,
    )
    try:
        first = last = None
        n = 0
        for _ in llm.generate(prompt, temp=0.0, top_k=1, repeat_penalty=1.0, reset=True):
            now = time.perf_counter()
            first = first or now
            last = now
            n += 1
            if n >= max_tokens:
                break
        return (n - 1) / (last - first) if n > 1 and last > first else 0.0
    finally:
        llm.close()
        lc.llama_log_set(_on_log, ctypes.c_void_p(0))  # Llama installs its own logger


def library_version() -> str:
    return getattr(lc, "__version__", "unknown")


# ---------------------------------------------------------------------------- model

KV_TYPES = {"f16": lc.GGML_TYPE_F16, "q8_0": lc.GGML_TYPE_Q8_0, "q4_0": lc.GGML_TYPE_Q4_0}


@dataclass(frozen=True)
class VocabInfo:
    """What a drafter must share with its target, and what the engine stops on."""

    n_vocab: int
    vocab_type: int
    bos: int  # -1 when the model has none
    eos: int
    eot: int
    add_bos: bool
    bos_text: str
    eos_text: str


class Model:
    """A loaded GGUF model (weights and vocabulary)."""

    def __init__(self, path: str | Path, *, n_gpu_layers: int = 0) -> None:
        from localspec.resolve.gguf_info import check_complete

        self.path = Path(path)
        self.n_gpu_layers = n_gpu_layers
        check_complete(self.path)  # a cut file: one clear sentence, not llama.cpp's failure
        _init()
        params = lc.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        # mmap named, as llama-cpp-python's Llama does: with the default (auto) a CUDA build
        # crashed in llama_model::print_info on the H200 (backtrace in issue 17's note)
        params.load_mode = lc.LLAMA_LOAD_MODE_MMAP
        llamalog.clear()
        ptr = lc.llama_model_load_from_file(str(self.path).encode(), params)
        if not ptr:
            log = llamalog.recent()
            if "out of memory" in log.lower() or "failed to allocate" in log.lower():
                raise OutOfMemory(
                    f"Not enough memory to load {self.path.name}; "
                    "try fewer GPU layers or a smaller quantisation.",
                    detail=log,
                )
            raise ModelLoadError(
                f"llama.cpp could not load {self.path}: it is corrupt, truncated or of "
                "an architecture this llama.cpp build does not support.",
                detail=log,
            )
        self._ptr = ptr
        #: what llama.cpp said it mapped or allocated for the weights (main buffers)
        self.reported_weights_bytes = llamalog.reported_bytes("model buffer size") - llamalog.reported_bytes("REPACK model buffer size")
        self._vocab = lc.llama_model_get_vocab(ptr)
        self.n_vocab = int(lc.llama_vocab_n_tokens(self._vocab))
        self.n_ctx_train = int(lc.llama_model_n_ctx_train(ptr))
        self.n_layer = int(lc.llama_model_n_layer(ptr))
        self._pieces: dict[int, bytes] = {}
        self._eog = np.zeros(self.n_vocab, dtype=bool)
        for t in range(self.n_vocab):
            if lc.llama_vocab_is_eog(self._vocab, t):
                self._eog[t] = True
        self.vocab = VocabInfo(
            n_vocab=self.n_vocab,
            vocab_type=int(lc.llama_vocab_type(self._vocab)),
            bos=int(lc.llama_vocab_bos(self._vocab)),
            eos=int(lc.llama_vocab_eos(self._vocab)),
            eot=int(lc.llama_vocab_eot(self._vocab)),
            add_bos=bool(lc.llama_vocab_get_add_bos(self._vocab)),
            bos_text=self._special_text(int(lc.llama_vocab_bos(self._vocab))),
            eos_text=self._special_text(int(lc.llama_vocab_eos(self._vocab))),
        )

    def _special_text(self, token: int) -> str:
        if token < 0:
            return ""
        return self.token_to_piece(token, special=True).decode("utf-8", errors="replace")

    # -- metadata

    def meta(self, key: str) -> str | None:
        size = 1 << 14
        while True:
            buf = ctypes.create_string_buffer(size)
            n = lc.llama_model_meta_val_str(self._ptr, key.encode(), buf, size)
            if n < 0:
                return None
            if n < size:
                return buf.value.decode("utf-8", errors="replace")
            size = n + 1

    @property
    def chat_template(self) -> str | None:
        raw = lc.llama_model_chat_template(self._ptr, None)
        return raw.decode("utf-8", errors="replace") if raw else None

    @property
    def architecture(self) -> str:
        return self.meta("general.architecture") or "unknown"

    @property
    def builtin_template_name(self) -> str | None:
        """llama.cpp's built-in template for this architecture, if it has one."""
        arch = self.architecture
        names = builtin_templates()
        if arch in names:
            return arch
        matches = [n for n in names if arch.startswith(n)]
        return max(matches, key=len) if matches else None

    @property
    def description(self) -> str:
        buf = ctypes.create_string_buffer(256)
        lc.llama_model_desc(self._ptr, buf, 256)
        return buf.value.decode("utf-8", errors="replace")

    @property
    def n_params(self) -> int:
        return int(lc.llama_model_n_params(self._ptr))

    # -- vocabulary

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        data = text.encode("utf-8")
        n_max = len(data) + 16
        buf = (lc.llama_token * n_max)()
        n = lc.llama_tokenize(self._vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            n_max = -n
            buf = (lc.llama_token * n_max)()
            n = lc.llama_tokenize(
                self._vocab, data, len(data), buf, n_max, add_special, parse_special
            )
        return list(buf[:n])

    def token_to_piece(self, token: int, *, special: bool = False) -> bytes:
        """The token's bytes (possibly part of a UTF-8 character); cached."""
        key = token if not special else ~token
        piece = self._pieces.get(key)
        if piece is None:
            buf = ctypes.create_string_buffer(64)
            n = lc.llama_token_to_piece(self._vocab, token, buf, 64, 0, special)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = lc.llama_token_to_piece(self._vocab, token, buf, -n, 0, special)
            piece = buf.raw[:n]
            self._pieces[key] = piece
        return piece

    def guidance_tokenizer(self):
        """llguidance's tokenizer for this vocabulary, every end-of-generation token an
        EOS (built once: about a second for a 150k vocabulary)."""
        if getattr(self, "_guidance", None) is None:
            from llguidance.llamacpp import lltokenizer_from_vocab

            eog = [int(t) for t in np.flatnonzero(self._eog)]
            self._guidance = lltokenizer_from_vocab(self._vocab, eos_token=eog or None)
        return self._guidance

    def is_eog(self, token: int) -> bool:
        return bool(self._eog[token])

    def token_text(self, token: int) -> str:
        """The vocabulary's stored text for a token (for comparing two vocabularies)."""
        raw = lc.llama_vocab_get_text(self._vocab, token)
        return raw.decode("utf-8", errors="replace") if raw else ""

    def apply_builtin_template(self, template: str, messages: list[tuple[str, str]]) -> str | None:
        """Render with llama.cpp's built-in templates, which it picks by name or by
        recognising ``template``; None when it recognises none."""
        keep = [(r.encode(), c.encode()) for r, c in messages]
        chat = (lc.llama_chat_message * len(keep))()
        for i, (r, c) in enumerate(keep):
            chat[i].role = r
            chat[i].content = c
        size = 4096 + sum(len(c) for _, c in keep) * 2
        buf = ctypes.create_string_buffer(size)
        n = lc.llama_chat_apply_template(template.encode(), chat, len(keep), True, buf, size)
        if n < 0:
            return None
        if n > size:
            buf = ctypes.create_string_buffer(n + 1)
            n = lc.llama_chat_apply_template(template.encode(), chat, len(keep), True, buf, n + 1)
        return buf.raw[:n].decode("utf-8", errors="replace")

    def close(self) -> None:
        if getattr(self, "_ptr", None):
            lc.llama_model_free(self._ptr)
            self._ptr = None

    def __del__(self) -> None:  # pragma: no cover - best effort at exit
        try:
            self.close()
        except Exception:
            pass


# ---------------------------------------------------------------------------- batch


class Batch:
    """A reusable llama_batch of (token, position, sequence, wants-logits) rows."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._b = lc.llama_batch_init(capacity, 0, 1)
        self.n = 0
        self._seq = [-1] * capacity  # what seq_id[i][0] holds, to skip rewriting it

    def clear(self) -> None:
        self.n = 0

    def add(self, token: int, pos: int, seq: int, logits: bool) -> int:
        """Append a row and return its index (the row to read logits from)."""
        i = self.n
        if i >= self.capacity:  # the rows are raw C arrays: never write past them
            raise RuntimeError(f"batch full ({self.capacity} rows)")
        b = self._b
        b.token[i] = token
        b.pos[i] = pos
        b.n_seq_id[i] = 1
        if self._seq[i] != seq:
            b.seq_id[i][0] = seq
            self._seq[i] = seq
        b.logits[i] = logits
        self.n = i + 1
        return i

    def close(self) -> None:
        if self._b is not None:
            lc.llama_batch_free(self._b)
            self._b = None

    def __del__(self) -> None:  # pragma: no cover
        try:
            self.close()
        except Exception:
            pass


# ---------------------------------------------------------------------------- context


class KVFull(DecodeError):
    """llama_decode found no room in the KV cache for the batch."""

    def __init__(self) -> None:
        super().__init__("The KV cache is full; raise --ctx-size or use fewer slots.")


class Context:
    """A llama.cpp context with ``n_seq`` sequences, each in a KV stream of its own
    (``split``, llama-server's layout under ``-np``) or all in one unified cache.

    Split is the default: in a unified cache every token attends over the cells of every
    sequence (masked), so four slots of 700 tokens cost each token the attention of 2,800;
    in a split one each attends over its own. A unified cache copies a sequence by tagging
    cells; a split one copies whole streams (``seq_cp`` below)."""

    def __init__(
        self,
        model: Model,
        *,
        n_ctx: int,
        n_batch: int = 512,
        n_seq: int = 1,
        n_threads: int | None = None,
        kv_type: str = "f16",
        split: bool = False,
    ) -> None:
        _init()
        self.model = model
        #: one KV stream per sequence (a single sequence is both)
        self.split = split and n_seq > 1
        threads = n_threads or default_threads()
        params = lc.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = min(n_batch, 512)
        params.n_seq_max = n_seq
        params.n_threads = threads
        params.n_threads_batch = threads
        params.kv_unified = not self.split
        params.type_k = KV_TYPES[kv_type]
        params.type_v = KV_TYPES[kv_type]
        if kv_type != "f16":  # a quantised V cache needs flash attention
            params.flash_attn_type = 1
        params.no_perf = True
        llamalog.clear()
        ptr = lc.llama_init_from_model(model._ptr, params)
        if not ptr:
            log = llamalog.recent()
            if "alloc" in log.lower() or "memory" in log.lower():
                raise OutOfMemory(
                    f"Not enough memory for a context of {n_ctx} tokens; "
                    "lower --ctx-size or the number of slots.",
                    detail=log,
                )
            if kv_type != "f16":
                raise ContextError(
                    f"llama.cpp could not create a context with a {kv_type} KV cache for "
                    f"{model.path.name} (a quantised cache needs flash attention and a head size "
                    "it supports); use --kv-type f16.",
                    detail=log,
                )
            raise ContextError(
                f"llama.cpp could not create a context of {n_ctx} tokens for "
                f"{model.path.name}.",
                detail=log,
            )
        self._ptr = ptr
        #: what llama.cpp said it allocated for the KV cache
        self.reported_kv_bytes = llamalog.reported_bytes("KV buffer size")
        self._mem = lc.llama_get_memory(ptr)
        self.n_ctx = int(lc.llama_n_ctx(ptr))
        self.n_batch = n_batch
        self.n_threads = threads
        self._row_type = ctypes.c_float * model.n_vocab
        #: the options that change what a saved sequence state means (prompt cache keys)
        self.state_options = f"fa={params.flash_attn_type},gpu={int(model.n_gpu_layers > 0)}"

    def decode(self, batch: Batch) -> None:
        """Run the batch; raise KVFull when the cache has no room, DecodeError on failure.
        Returns when the batch is computed: on a GPU llama_decode only queues the work
        (the first logits read waits for it), and a decode timed without waiting measured
        the launch (the H200's calibration had T(3) and T(4) below T(1)). The engine reads
        logits after nearly every decode, so waiting here costs next to nothing."""
        b = batch._b
        b.n_tokens = batch.n
        rc = lc.llama_decode(self._ptr, b)
        if rc == 0:
            lc.llama_synchronize(self._ptr)
            return
        if rc == 1:
            raise KVFull()
        raise DecodeError(
            f"llama.cpp failed to evaluate a batch of {batch.n} tokens (code {rc}).",
            detail=llamalog.recent(),
        )

    def logits(self, row: int) -> np.ndarray:
        """The logits of batch row ``row`` after the last decode: a read-only view that
        the next decode overwrites (copy it to keep it)."""
        ptr = lc.llama_get_logits_ith(self._ptr, row)
        arr = np.frombuffer(
            self._row_type.from_address(ctypes.addressof(ptr.contents)), dtype=np.float32
        )
        arr.flags.writeable = False
        return arr

    def seq_rm(self, seq: int, p0: int = -1, p1: int = -1) -> None:
        """Forget positions [p0, p1) of a sequence (-1: open end)."""
        if not lc.llama_memory_seq_rm(self._mem, seq, p0, p1):
            raise DecodeError(f"llama.cpp could not remove positions {p0}..{p1} of slot {seq}.")

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        """Make ``dst`` hold positions [p0, p1) of ``src`` (-1: open end), and nothing else.
        A split cache copies only whole streams (llama.cpp asserts otherwise, at the next
        decode's update): the stream is copied whole and cut to the range."""
        self.seq_rm(dst, -1, -1)
        if not self.split:
            lc.llama_memory_seq_cp(self._mem, src, dst, p0, p1)
            return
        lc.llama_memory_seq_cp(self._mem, src, dst, -1, -1)
        if p1 >= 0:
            self.seq_rm(dst, p1, -1)
        if p0 > 0:
            self.seq_rm(dst, 0, p0)

    def seq_pos_max(self, seq: int) -> int:
        """The last position a sequence holds in the KV cache; -1 when it holds none."""
        return int(lc.llama_memory_seq_pos_max(self._mem, seq))

    def state_seq_get(self, seq: int) -> bytearray:
        """The KV state of one sequence (its cells' positions and every layer's K and V),
        as llama.cpp serialises it for ``state_seq_set``."""
        size = lc.llama_state_seq_get_size(self._ptr, seq)
        out = bytearray(size)
        if size:
            n = lc.llama_state_seq_get_data(self._ptr, (ctypes.c_uint8 * size).from_buffer(out), size, seq)
            del out[n:]
        return out

    def state_seq_set(self, seq: int, state: bytearray) -> bool:
        """Replace a sequence's KV with a saved state; False (the sequence left empty)
        when llama.cpp refuses it (another model's, or no room in the cache)."""
        if not state:
            return False
        buf = (ctypes.c_uint8 * len(state)).from_buffer(state)
        if lc.llama_state_seq_set_data(self._ptr, buf, len(state), seq) == 0:
            self.seq_rm(seq, -1, -1)
            return False
        return True

    def close(self) -> None:
        if getattr(self, "_ptr", None):
            lc.llama_free(self._ptr)
            self._ptr = None

    def __del__(self) -> None:  # pragma: no cover
        try:
            self.close()
        except Exception:
            pass


def default_threads() -> int:
    """All cores this process may use: llama.cpp decodes fastest with one thread per core."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


if __name__ == "__main__":  # the child process of reference_decode_rate
    import json

    _req = json.loads(sys.stdin.read())
    print(_reference_in_process(Path(_req["path"]), _req["prompt"], _req["max_tokens"], _req["n_ctx"], _req["n_threads"]))
