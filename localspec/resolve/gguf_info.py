"""What a GGUF header says about a model, read without llama.cpp and without the weights.

The header is parsed by ``gguf_header`` from a memory map (only its pages are read) or
from a prefix fetched over HTTP; any parse failure becomes one ModelLoadError sentence.
A local file is also checked to hold all its tensors' data (``check_tensor_data``).
"""

from __future__ import annotations

import hashlib
import mmap
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from localspec.errors import ModelLoadError, ModelNotFound
from localspec.resolve.gguf_header import BadHeader, Header, Incomplete, parse

_LAYER = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class Tokenizer:
    """What decides whether two models can share drafts: the token list and the specials."""

    model: str
    n_vocab: int
    bos_id: int | None
    eos_id: int | None
    eot_id: int | None
    tokens_sha256: str

    @property
    def fingerprint(self) -> str:
        return self.tokens_sha256[:16]

    def differences(self, other: Tokenizer) -> list[str]:
        out = []
        for what in ("model", "n_vocab", "bos_id", "eos_id", "eot_id"):
            a, b = getattr(self, what), getattr(other, what)
            if a != b:
                out.append(f"{what.replace('n_vocab', 'vocab size').replace('_id', ' id')} {a} vs {b}")
        if not out and self.tokens_sha256 != other.tokens_sha256:
            out.append("the token texts differ")
        return out


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
    n_params: int = 0
    size_label: str | None = None
    tokenizer: Tokenizer | None = field(default=None, repr=False)
    origin: str | None = None  # the Hub repo of the weights this GGUF was converted from

    @property
    def weights_bytes(self) -> int:
        return sum(self.layer_bytes) + self.output_bytes + self.embedding_bytes + self.other_bytes

    @property
    def quant(self) -> str | None:
        """The file type's name as quant tags are written (``Q4_K_M``)."""
        if self.file_type is None:
            return None
        import gguf

        try:
            name = gguf.LlamaFileType(self.file_type).name
        except ValueError:
            return None
        return name.removeprefix("MOSTLY_").replace("ALL_", "")


_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")


def read_header(path: Path) -> tuple[Header, int]:
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return parse(buf), len(buf)
    except (Incomplete, BadHeader, ValueError, OSError) as exc:
        reason = "it ends inside the header" if isinstance(exc, Incomplete) else str(exc)
        raise ModelLoadError(f"{path} is truncated or damaged: its GGUF header cannot be read ({reason}).") from exc


def split_parts(path: Path, header: Header) -> list[Path]:
    """The other files of a gguf-split model (``-00001-of-0000N.gguf``), as llama.cpp
    finds them: beside the first part."""
    count = header.kv.get("split.count")
    m = _SPLIT.search(path.name)
    if not isinstance(count, int) or count <= 1 or not m:
        return []
    stem = path.name[: m.start()]
    return [path.with_name(f"{stem}-{i:05d}-of-{count:05d}.gguf") for i in range(2, count + 1)]


def merge(first: Header, others: list[Header]) -> Header:
    """One header for a split model: the first part's keys, every part's tensors."""
    return replace(first, tensors=[t for h in [first, *others] for t in h.tensors])


def check_tensor_data(path: Path, header: Header, file_bytes: int) -> None:
    """Refuse a file that ends before its last tensor's data (a cut download or copy).

    llama.cpp would fail on it with a vague message, or not at all until it reads the
    missing pages; the header alone says where each tensor ends, so no weight is read."""
    align = header.kv.get("general.alignment")
    align = align if isinstance(align, int) and align > 0 else 32
    start = -(-header.header_bytes // align) * align  # the data section, aligned
    end, name = 0, ""
    for t in header.tensors:
        try:
            t_end = start + t.offset + t.n_bytes
        except (KeyError, ValueError):  # a ggml type the gguf package does not know: llama.cpp judges
            continue
        if t_end > end:
            end, name = t_end, t.name
    if end > file_bytes:
        raise ModelLoadError(
            f"{path} is truncated: tensor '{name}' needs bytes up to {end:,} but the file has "
            f"{file_bytes:,}; download it again."
        )


#: model path -> (file, size, mtime_ns) of each of its files, as last found complete
_complete: dict[Path, tuple[tuple[Path, int, int], ...]] = {}


def _stamp(files: list[Path]) -> tuple[tuple[Path, int, int], ...]:
    return tuple((f, (s := f.stat()).st_size, s.st_mtime_ns) for f in files)


def read_parts(path: Path) -> list[tuple[Header, int]]:
    """The header and size of each file of a local model (one, or every gguf-split part),
    each checked to hold all its tensor data."""
    header, size = read_header(path)
    check_tensor_data(path, header, size)
    out, files = [(header, size)], [path]
    for part in split_parts(path, header):
        if not part.is_file():
            raise ModelLoadError(f"{path} is part of a split model, and its part {part.name} is missing.")
        h, n = read_header(part)
        check_tensor_data(part, h, n)
        out.append((h, n))
        files.append(part)
    _complete[path] = _stamp(files)
    return out


def check_complete(path: str | Path) -> None:
    """Before llama.cpp loads ``path``: refuse it (one ModelLoadError sentence) if any of
    its files is cut short. Reads headers only, and nothing again for files unchanged since
    they were last read whole (``read_info`` before a load, say)."""
    path = Path(path)
    if not path.is_file():
        raise ModelNotFound(f"No model file at {path}.")
    seen = _complete.get(path)
    try:
        if seen and _stamp([f for f, _, _ in seen]) == seen:
            return
    except OSError:
        pass
    read_parts(path)


def read_info(path: str | Path) -> ModelInfo:
    path = Path(path)
    parts = read_parts(path)
    header = merge(parts[0][0], [h for h, _ in parts[1:]])
    return info_from_header(header, path, sum(n for _, n in parts))


def info_from_header(header: Header, path: Path, file_bytes: int) -> ModelInfo:
    try:
        kv = header.kv

        def get(key: str, default=None):
            value = kv.get(key)
            return default if value is None else value

        arch = str(get("general.architecture", "unknown"))

        def hp(name: str, default=0):
            return get(f"{arch}.{name}", default)

        n_head = int(_first(hp("attention.head_count", 0)) or 0)
        n_head_kv_raw = hp("attention.head_count_kv", n_head)
        if isinstance(n_head_kv_raw, list):  # per-layer counts (some architectures)
            n_head_kv_raw = max(n_head_kv_raw) if n_head_kv_raw else n_head
        n_head_kv = int(n_head_kv_raw or n_head)
        n_embd = int(hp("embedding_length", 0) or 0)
        head_dim = n_embd // n_head if n_head else 0
        n_layer = int(hp("block_count", 0) or 0)
        layers = [0] * n_layer
        output = embedding = other = params = 0
        for t in header.tensors:
            m = _LAYER.match(t.name)
            size = t.n_bytes
            params += t.n_elements
            if m and int(m.group(1)) < n_layer:
                layers[int(m.group(1))] += size
            elif t.name.startswith("output"):
                output += size
            elif t.name.startswith("token_embd"):
                embedding += size
            else:
                other += size
        n_vocab = header.array_lengths.get("tokenizer.ggml.tokens", 0)
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
            file_bytes=file_bytes,
            layer_bytes=layers,
            output_bytes=output,
            embedding_bytes=embedding,
            other_bytes=other,
            has_chat_template="tokenizer.chat_template" in kv,
            n_params=params,
            size_label=get("general.size_label"),
            tokenizer=_tokenizer(kv, n_vocab),
            origin=origin_repo(kv),
        )
    except Exception as exc:
        raise ModelLoadError(f"{path} is truncated or damaged: its GGUF header cannot be read ({exc}).") from exc


def _tokenizer(kv: dict, n_vocab: int) -> Tokenizer | None:
    tokens = kv.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list):
        return None
    digest = hashlib.sha256()
    for t in tokens:
        digest.update(t)
        digest.update(b"\0")

    def special(name: str) -> int | None:
        value = kv.get(f"tokenizer.ggml.{name}_token_id")
        return int(value) if isinstance(value, int) else None

    return Tokenizer(
        model=str(kv.get("tokenizer.ggml.model", "")),
        n_vocab=n_vocab,
        bos_id=special("bos"),
        eos_id=special("eos"),
        eot_id=special("eot"),
        tokens_sha256=digest.hexdigest(),
    )


_HF_URL = re.compile(r"^https?://(?:www\.)?(?:huggingface\.co|hf\.co)/([\w.-]+/[\w.-]+)/?(?:$|[/?#])")
_REPO = re.compile(r"^[\w.-]+/[\w.-]+$")


def origin_repo(kv: dict) -> str | None:
    """The Hub repo whose weights this GGUF was converted from: ``general.source.repo_url``
    or ``general.source.url`` (an huggingface.co address), or the older
    ``general.source.huggingface.repository``. Not ``general.base_model.*``: that names
    the model a fine-tune was trained from (an instruct model's base), not these weights."""
    for key in ("general.source.repo_url", "general.source.url"):
        value = kv.get(key)
        m = _HF_URL.match(value) if isinstance(value, str) else None
        if m:
            return m.group(1).removesuffix(".git")
    value = kv.get("general.source.huggingface.repository")
    return value if isinstance(value, str) and _REPO.match(value) else None


def _first(value):
    return value[0] if isinstance(value, list) and value else value
