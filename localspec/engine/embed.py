"""Embeddings: llama.cpp's own pooling, in a context of their own, batched, L2-normalised.

The context is separate from the one that generates (``embeddings`` on, its pooling set,
one ubatch as large as the context: a non-causal model must see a whole input at once),
so embedding never disturbs the slots' KV caches. Inputs are packed into batches of up
to ``n_ctx`` tokens and ``MAX_SEQS`` sequences; each sequence's pooled vector is read with
``llama_get_embeddings_seq`` and scaled to unit length, as OpenAI's are.
"""

from __future__ import annotations

import ctypes
import threading

import llama_cpp as lc
import numpy as np

from localspec.engine import backend
from localspec.errors import ContextError, InvalidRequest, OutOfMemory

MAX_SEQS = 64  # inputs decoded together at most (llama.cpp allows 256); a batch is also capped at n_ctx tokens

# Flash attention only for encoders (no causal mask, no KV cache). With a KV cache, on the
# CPU, it moved SmolLM2-135M's mean-pooled vector of a 7-token sentence to cosine 0.99903
# of the exact one (off: 1.0000000, as llama-cpp-python's Llama.embed gives); for
# nomic-embed-text-v1.5 it is exact (cosine 1 - 5e-7) and 28% faster (64 short texts:
# 43.3 against 33.7 a second, 2 threads).
FLASH_ATTN_ENCODER = lc.LLAMA_FLASH_ATTN_TYPE_AUTO
FLASH_ATTN_DECODER = lc.LLAMA_FLASH_ATTN_TYPE_DISABLED
POOLING = {lc.LLAMA_POOLING_TYPE_MEAN: "mean", lc.LLAMA_POOLING_TYPE_CLS: "cls", lc.LLAMA_POOLING_TYPE_LAST: "last"}


def declared_pooling(model: backend.Model) -> int | None:
    """The pooling type the GGUF declares (``{arch}.pooling_type``), None where it declares none."""
    value = model.meta(f"{model.architecture}.pooling_type")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def is_embedding_model(model: backend.Model) -> bool:
    """A model that declares how to pool its outputs is made for embeddings (BERT-like
    encoders, Qwen3-Embedding), not for chat."""
    return declared_pooling(model) not in (None, lc.LLAMA_POOLING_TYPE_NONE)


class Embedder:
    """One model's embedding context; ``embed`` may be called from any thread (one at a time)."""

    def __init__(self, model: backend.Model, *, n_ctx: int, n_threads: int | None = None) -> None:
        pooling = declared_pooling(model)
        if pooling == lc.LLAMA_POOLING_TYPE_RANK:
            raise InvalidRequest(f"{model.path.name} is a reranker: it scores pairs of texts and gives no embeddings.")
        self.pooling = lc.LLAMA_POOLING_TYPE_MEAN if pooling in (None, lc.LLAMA_POOLING_TYPE_NONE) else pooling
        self.model = model
        self.n_ctx = n_ctx
        self.n_embd = int(lc.llama_model_n_embd(model._ptr))
        threads = n_threads or backend.default_threads()
        params = lc.llama_context_default_params()
        params.n_ctx = params.n_batch = params.n_ubatch = n_ctx
        params.n_seq_max = MAX_SEQS
        params.n_threads = params.n_threads_batch = threads
        params.embeddings = True
        params.pooling_type = self.pooling
        params.kv_unified = True
        causal = model.meta(f"{model.architecture}.attention.causal") not in ("false", "0")
        params.flash_attn_type = FLASH_ATTN_DECODER if causal else FLASH_ATTN_ENCODER
        params.no_perf = True
        ptr = lc.llama_init_from_model(model._ptr, params)
        if not ptr:
            log = backend.llamalog.recent()
            if "alloc" in log.lower() or "memory" in log.lower():
                raise OutOfMemory(f"Not enough memory for an embedding context of {n_ctx} tokens for "
                                  f"{model.path.name}; lower --ctx-size.", detail=log)
            raise ContextError(f"llama.cpp could not create an embedding context for {model.path.name}.", detail=log)
        self._ptr = ptr
        self._mem = lc.llama_get_memory(ptr)
        self._batch = backend.Batch(n_ctx)
        self._lock = threading.Lock()

    @property
    def pooling_name(self) -> str:
        return POOLING.get(self.pooling, str(self.pooling))

    def tokenize(self, text: str) -> list[int]:
        """Tokens as the model's own tokenizer adds them (BOS, or CLS and SEP), specials as text."""
        return self.model.tokenize(text, add_special=True, parse_special=False)

    def embed(self, inputs: list[list[int]]) -> list[np.ndarray]:
        """A unit vector for each input's tokens (each 1..n_ctx long, ids in the vocabulary)."""
        for i, tokens in enumerate(inputs):
            if not tokens:
                raise InvalidRequest(f"Input {i} is empty.")
            if len(tokens) > self.n_ctx:
                raise InvalidRequest(f"Input {i} is {len(tokens)} tokens; this model's embedding context "
                                     f"holds {self.n_ctx} (raise --ctx-size).")
            if min(tokens) < 0 or max(tokens) >= self.model.n_vocab:
                raise InvalidRequest(f"Input {i} has a token id outside the vocabulary (0..{self.model.n_vocab - 1}).")
        out: list[np.ndarray] = []
        with self._lock:
            if self._ptr is None:
                raise InvalidRequest("The model has been unloaded.")
            for group in self._groups(inputs):
                out.extend(self._decode(group))
        return out

    def _groups(self, inputs: list[list[int]]) -> list[list[list[int]]]:
        groups: list[list[list[int]]] = []
        size = 0
        for tokens in inputs:
            if not groups or size + len(tokens) > self.n_ctx or len(groups[-1]) >= MAX_SEQS:
                groups.append([])
                size = 0
            groups[-1].append(tokens)
            size += len(tokens)
        return groups

    def _decode(self, group: list[list[int]]) -> list[np.ndarray]:
        if self._mem:
            lc.llama_memory_clear(self._mem, True)
        batch = self._batch
        batch.clear()
        for seq, tokens in enumerate(group):
            for pos, token in enumerate(tokens):
                batch.add(token, pos, seq, True)
        batch._b.n_tokens = batch.n
        rc = lc.llama_decode(self._ptr, batch._b)
        if rc != 0:
            raise ContextError(f"llama.cpp failed to embed a batch of {batch.n} tokens (code {rc}).",
                               detail=backend.llamalog.recent())
        vectors = []
        for seq in range(len(group)):
            ptr = lc.llama_get_embeddings_seq(self._ptr, seq)
            if not ptr:
                raise ContextError("llama.cpp gave no pooled embedding for the batch.")
            v = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(self.n_embd,)).copy()
            norm = float(np.linalg.norm(v))
            vectors.append(v / norm if norm > 0 else v)
        return vectors

    def close(self) -> None:
        with self._lock:
            if self._ptr is not None:
                self._batch.close()
                lc.llama_free(self._ptr)
                self._ptr = None
