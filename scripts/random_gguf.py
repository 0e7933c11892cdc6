"""Random-weight GGUFs in the shapes of real models, with a real model's tokenizer, for
measuring what decodes cost on a machine without its weights: compute does not depend on
the values, so a random Qwen2.5-Coder-7B costs what the real one does.

Weights are written already quantised (Q4_K where a row is a multiple of 256 values, as in
Q4_K_M; Q8_0 elsewhere, as llama.cpp's quantiser falls back), as random blocks whose
scales are set small so that activations stay finite. One random buffer per tensor shape
is shared by every layer: writing a 7B model takes seconds, not minutes.

    python scripts/random_gguf.py qwen2.5-coder-7b OUT.gguf --tokenizer qwen-tokenizer.json.gz
    python scripts/random_gguf.py tokenizer REAL.gguf qwen-tokenizer.json.gz   # extract one
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Shape:
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    tied: bool  # the output layer is the token embedding
    n_ctx: int = 32768


SHAPES = {
    "qwen2.5-coder-7b": Shape(3584, 28, 28, 4, 18944, tied=False),
    "qwen2.5-coder-1.5b": Shape(1536, 28, 12, 2, 8960, tied=True),
    "qwen2.5-coder-0.5b": Shape(896, 24, 14, 2, 4864, tied=True),
    "smollm2-135m": Shape(576, 30, 9, 3, 1536, tied=True),  # its dimensions, on Qwen's vocabulary
    "tiny": Shape(64, 2, 4, 2, 128, tied=True, n_ctx=4096),
}
TOKENIZER_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                  "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                  "tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.chat_template")


def extract_tokenizer(gguf_path: Path, out: Path) -> None:
    """A GGUF's tokenizer (and chat template) as gzipped JSON (Qwen's: about 2 MB)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf_path))
    data = {}
    for key in TOKENIZER_KEYS:
        field = reader.get_field(key)
        if field is not None:
            value = field.contents()
            data[key] = value
    out.write_bytes(gzip.compress(json.dumps(data).encode(), 6))


def _blocks(rng: np.random.Generator, n_values: int, kind: str) -> np.ndarray:
    """Random quantised blocks for ``n_values`` weights, their scales set small."""
    if kind == "Q4_K":  # 256 values in 144 bytes: d, dmin (f16), 12 bytes of scales, 128 of nibbles
        raw = np.frombuffer(rng.bytes(n_values // 256 * 144), np.uint8).reshape(-1, 144).copy()
        raw[:, 0:2] = np.frombuffer(np.float16(2e-4).tobytes(), np.uint8)
        raw[:, 2:4] = 0
    else:  # Q8_0: 32 values in 34 bytes: d (f16), 32 int8
        raw = np.frombuffer(rng.bytes(n_values // 32 * 34), np.uint8).reshape(-1, 34).copy()
        raw[:, 0:2] = np.frombuffer(np.float16(2e-3).tobytes(), np.uint8)
    return raw.reshape(-1)


def write(shape: Shape, tokenizer: dict, out: Path, name: str = "random", seed: int = 0) -> Path:
    import gguf

    rng = np.random.default_rng(seed)
    n_vocab = len(tokenizer["tokenizer.ggml.tokens"])
    head = shape.n_embd // shape.n_head
    w = gguf.GGUFWriter(str(out), "qwen2")
    w.add_name(f"{name} (random weights)")
    w.add_context_length(shape.n_ctx)
    w.add_embedding_length(shape.n_embd)
    w.add_block_count(shape.n_layer)
    w.add_feed_forward_length(shape.n_ff)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(shape.n_head_kv)
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    for key, value in tokenizer.items():
        _add(w, key, value)

    shared: dict[tuple[int, int], tuple[np.ndarray, object]] = {}

    def matrix(tensor: str, rows: int, cols: int) -> None:
        """A weight of ``rows`` outputs by ``cols`` inputs (GGUF shape [cols, rows])."""
        if (rows, cols) not in shared:
            kind = "Q4_K" if cols % 256 == 0 else "Q8_0"
            shared[(rows, cols)] = (_blocks(rng, rows * cols, kind), getattr(gguf.GGMLQuantizationType, kind))
        data, qtype = shared[(rows, cols)]
        w.add_tensor(tensor, data, raw_shape=(rows, cols * (144 if qtype.name == "Q4_K" else 34)
                                                // (256 if qtype.name == "Q4_K" else 32)), raw_dtype=qtype)

    ones = np.ones(shape.n_embd, np.float32)
    matrix("token_embd.weight", n_vocab, shape.n_embd)
    w.add_tensor("output_norm.weight", ones)
    if not shape.tied:
        matrix("output.weight", n_vocab, shape.n_embd)
    kv = shape.n_head_kv * head
    for i in range(shape.n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones)
        w.add_tensor(p + "ffn_norm.weight", ones)
        matrix(p + "attn_q.weight", shape.n_embd, shape.n_embd)
        matrix(p + "attn_k.weight", kv, shape.n_embd)
        matrix(p + "attn_v.weight", kv, shape.n_embd)
        matrix(p + "attn_output.weight", shape.n_embd, shape.n_embd)
        w.add_tensor(p + "attn_q.bias", np.zeros(shape.n_embd, np.float32))
        w.add_tensor(p + "attn_k.bias", np.zeros(kv, np.float32))
        w.add_tensor(p + "attn_v.bias", np.zeros(kv, np.float32))
        matrix(p + "ffn_gate.weight", shape.n_ff, shape.n_embd)
        matrix(p + "ffn_up.weight", shape.n_ff, shape.n_embd)
        matrix(p + "ffn_down.weight", shape.n_embd, shape.n_ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


_ADDERS = {"tokenizer.ggml.tokens": "add_token_list", "tokenizer.ggml.token_type": "add_token_types",
           "tokenizer.ggml.merges": "add_token_merges", "tokenizer.ggml.model": "add_tokenizer_model",
           "tokenizer.ggml.pre": "add_tokenizer_pre", "tokenizer.chat_template": "add_chat_template"}


def _add(w, key: str, value) -> None:
    if key in _ADDERS:
        getattr(w, _ADDERS[key])(value)
    elif key == "tokenizer.ggml.add_bos_token":
        w.add_add_bos_token(bool(value))
    elif key.endswith("_token_id"):
        w.add_uint32(key, int(value))


def load_tokenizer(path: Path) -> dict:
    """Gzipped JSON (``extract_tokenizer``), or straight from a GGUF."""
    if path.suffix == ".gguf":
        tmp = Path(str(path) + ".tokenizer.json.gz")
        extract_tokenizer(path, tmp)
        path = tmp
    return json.loads(gzip.decompress(path.read_bytes()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shape", help=f"one of {', '.join(SHAPES)}, or 'tokenizer' to extract one")
    ap.add_argument("args", nargs="+")
    ap.add_argument("--tokenizer", help="gzipped JSON from 'tokenizer', or a GGUF to take it from")
    a = ap.parse_args()
    if a.shape == "tokenizer":
        extract_tokenizer(Path(a.args[0]), Path(a.args[1]))
        return
    if a.shape not in SHAPES or not a.tokenizer:
        sys.exit(f"usage: random_gguf.py {{{','.join(SHAPES)}}} OUT.gguf --tokenizer FILE")
    write(SHAPES[a.shape], load_tokenizer(Path(a.tokenizer)), Path(a.args[0]), a.shape)


if __name__ == "__main__":
    main()
