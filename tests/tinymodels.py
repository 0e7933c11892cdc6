"""Tiny random llama-architecture GGUF models, written with the ``gguf`` package.

They load in llama.cpp like any real model but weigh a few hundred KB and decode in well
under a millisecond, so tests can run hundreds of generations. The vocabulary is GPT-2
style byte-level BPE: 256 byte tokens, a few merges and chat/control tokens, so text of
any bytes round-trips and multi-byte UTF-8 characters are split across tokens. Weights
are f32, where llama.cpp gives bit-identical logits however a batch is laid out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_MERGES = [
    ("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("e", "r"), ("a", "n"), ("Ġ", "a"),
    ("o", "n"), ("r", "e"), ("Ġ", "s"), ("e", "n"), ("Ġ", "w"), ("a", "t"), ("o", "r"),
    ("Ġ", "c"), ("e", "s"), ("i", "s"), ("Ġ", "b"), ("Ġ", "f"), ("Ġ", "o"), ("e", "d"),
    ("Ġ", "m"), ("i", "t"), ("a", "r"), ("Ġ", "p"), ("Ġ", "d"), ("in", "g"), ("l", "l"),
]
SPECIALS = ["<|bos|>", "<|eos|>", "<|im_start|>", "<|im_end|>"]


def _bytes_to_unicode() -> list[str]:
    """GPT-2's reversible byte -> printable character map, in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    keep += list(range(ord("®"), ord("ÿ") + 1))
    chars = {}
    extra = 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def vocabulary(variant: int = 0) -> tuple[list[str], list[int], list[str]]:
    """The byte-level vocabulary; ``variant`` 1 orders the merges differently (same size,
    other token texts: a tokenizer that must not pair with variant 0)."""
    tokens = _bytes_to_unicode()
    types = [gguf.TokenType.NORMAL] * 256
    merges = []
    for a, b in (_MERGES if variant == 0 else _MERGES[::-1]):
        tokens.append(a + b)
        types.append(gguf.TokenType.NORMAL)
        merges.append(f"{a} {b}")
    for s in SPECIALS:
        tokens.append(s)
        types.append(gguf.TokenType.CONTROL)
    return tokens, types, merges


N_VOCAB = len(vocabulary()[0])
BOS_ID = N_VOCAB - 4
EOS_ID = N_VOCAB - 3


@dataclass(frozen=True)
class TinySpec:
    seed: int = 0
    n_layer: int = 2
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    n_ctx: int = 2048
    logit_scale: float = 0.45  # std of the output weights: how peaked the next-token choice is
    chat_template: str | None = CHATML
    vocab_variant: int = 0
    # The weights of the model this one perturbs (a draft of it), and by how much.
    base_seed: int | None = None
    noise: float = 0.0
    source_url: str | None = None  # general.source.repo_url: the original weights' repo


def _weights(spec: TinySpec) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(spec.seed)
    e, f, v = spec.n_embd, spec.n_ff, N_VOCAB
    hd = e // spec.n_head
    kv = hd * spec.n_head_kv

    def w(*shape: int, std: float) -> np.ndarray:
        return rng.normal(0.0, std, size=shape).astype(np.float32)

    out = w(v, e, std=spec.logit_scale)
    out[v - len(SPECIALS) :] = 0.0  # control tokens get logit 0: never greedy, rarely sampled
    t = {
        "token_embd.weight": w(v, e, std=1.0),
        "output_norm.weight": np.ones(e, dtype=np.float32),
        "output.weight": out,
    }
    for i in range(spec.n_layer):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = np.ones(e, dtype=np.float32)
        t[p + "attn_q.weight"] = w(e, e, std=0.2)
        t[p + "attn_k.weight"] = w(kv, e, std=0.2)
        t[p + "attn_v.weight"] = w(kv, e, std=0.2)
        t[p + "attn_output.weight"] = w(e, e, std=0.1)
        t[p + "ffn_norm.weight"] = np.ones(e, dtype=np.float32)
        t[p + "ffn_gate.weight"] = w(f, e, std=0.1)
        t[p + "ffn_up.weight"] = w(f, e, std=0.1)
        t[p + "ffn_down.weight"] = w(e, f, std=0.1)
    return t


def write_tiny_model(path: Path, spec: TinySpec = TinySpec(), split_max_tensors: int = 0) -> Path:
    """Write the model; with ``split_max_tensors`` as llama.cpp's gguf-split parts
    (``stem-00001-of-0000N.gguf`` ...), returning the first part."""
    tensors = _weights(spec)
    if spec.base_seed is not None:
        base = _weights(TinySpec(**{**spec.__dict__, "seed": spec.base_seed, "base_seed": None}))
        rng = np.random.default_rng(spec.seed + 10_000)
        tensors = {
            k: (base[k] + rng.normal(0.0, spec.noise, size=base[k].shape) * base[k].std()).astype(
                np.float32
            )
            if k.endswith("weight") and "norm" not in k
            else base[k]
            for k in base
        }
    tokens, types, merges = vocabulary(spec.vocab_variant)
    w = gguf.GGUFWriter(str(path), "llama", split_max_tensors=split_max_tensors)
    w.add_name(f"tiny-{spec.seed}")
    w.add_context_length(spec.n_ctx)
    w.add_embedding_length(spec.n_embd)
    w.add_block_count(spec.n_layer)
    w.add_feed_forward_length(spec.n_ff)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_rope_dimension_count(spec.n_embd // spec.n_head)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(BOS_ID)
    w.add_eos_token_id(EOS_ID)
    w.add_add_bos_token(True)
    if spec.source_url:
        w.add_string("general.source.repo_url", spec.source_url)
    if spec.chat_template:
        w.add_chat_template(spec.chat_template)
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if split_max_tensors:
        return sorted(path.parent.glob(f"{path.stem}-00001-of-*.gguf"))[0]
    return path
