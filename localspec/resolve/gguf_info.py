"""What a GGUF header says about a model, read without llama.cpp and without the weights.

The header is memory-mapped by ``gguf.GGUFReader``; hard caps refuse absurd counts before
anything large is touched, and any parse failure becomes one ModelLoadError sentence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from localspec.errors import ModelLoadError

MAX_TENSORS = 100_000
MAX_KV = 100_000
_LAYER = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class ModelInfo:
    path: Path
    architecture: str
    name: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    n_ff: int
    n_vocab: int
    context_length: int
    file_type: int | None
    file_bytes: int
    layer_bytes: list[int] = field(repr=False)  # weights of each repeating layer
    output_bytes: int = 0  # output.weight (+ output norm): offloaded with "all" layers
    embedding_bytes: int = 0  # token_embd.weight: stays on the CPU in llama.cpp
    other_bytes: int = 0
    has_chat_template: bool = False

    @property
    def weights_bytes(self) -> int:
        return sum(self.layer_bytes) + self.output_bytes + self.embedding_bytes + self.other_bytes


def read_info(path: str | Path) -> ModelInfo:
    import gguf

    path = Path(path)
    try:
        reader = gguf.GGUFReader(str(path), "r")
    except Exception as exc:  # the exception types vary with the damage
        raise ModelLoadError(f"{path} is truncated or damaged: its GGUF header cannot be read ({exc}).") from exc
    try:
        if len(reader.tensors) > MAX_TENSORS or len(reader.fields) > MAX_KV:
            raise ModelLoadError(f"{path} declares an implausible number of tensors or keys.")

        def get(key: str, default=None):
            f = reader.fields.get(key)
            if f is None or not f.data:
                return default
            try:
                return f.contents()
            except Exception:
                return default

        arch = str(get("general.architecture", "unknown"))

        def hp(name: str, default=0):
            return get(f"{arch}.{name}", default)

        n_head = int(hp("attention.head_count", 0) or 0)
        n_head_kv_raw = hp("attention.head_count_kv", n_head)
        if isinstance(n_head_kv_raw, list):  # per-layer counts (some architectures)
            n_head_kv_raw = max(n_head_kv_raw) if n_head_kv_raw else n_head
        n_head_kv = int(n_head_kv_raw or n_head)
        n_embd = int(hp("embedding_length", 0) or 0)
        head_dim = n_embd // n_head if n_head else 0
        n_layer = int(hp("block_count", 0) or 0)
        layers = [0] * n_layer
        output = embedding = other = 0
        for t in reader.tensors:
            m = _LAYER.match(t.name)
            size = int(t.n_bytes)
            if m and int(m.group(1)) < n_layer:
                layers[int(m.group(1))] += size
            elif t.name.startswith("output"):
                output += size
            elif t.name.startswith("token_embd"):
                embedding += size
            else:
                other += size
        tokens = reader.fields.get("tokenizer.ggml.tokens")
        n_vocab = len(tokens.data) if tokens is not None else 0
        return ModelInfo(
            path=path,
            architecture=arch,
            name=str(get("general.name", path.stem)),
            n_layer=n_layer,
            n_embd=n_embd,
            n_head=n_head,
            n_head_kv=n_head_kv,
            head_dim_k=int(hp("attention.key_length", head_dim) or head_dim),
            head_dim_v=int(hp("attention.value_length", head_dim) or head_dim),
            n_ff=int(_first(hp("feed_forward_length", 0)) or 0),
            n_vocab=n_vocab,
            context_length=int(hp("context_length", 0) or 0),
            file_type=get("general.file_type"),
            file_bytes=path.stat().st_size,
            layer_bytes=layers,
            output_bytes=output,
            embedding_bytes=embedding,
            other_bytes=other,
            has_chat_template="tokenizer.chat_template" in reader.fields,
        )
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(f"{path} is truncated or damaged: its GGUF header cannot be read ({exc}).") from exc


def _first(value):
    return value[0] if isinstance(value, list) and value else value
