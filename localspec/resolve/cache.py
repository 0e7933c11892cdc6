"""The GGUF models in the Hugging Face cache: listing, last use, removal.

Listing goes through ``huggingface_hub.scan_cache_dir``; removal unlinks the snapshot
entries and every blob no other snapshot still points to, as ``hf cache rm`` would.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from localspec.resolve.hub import Choice, RepoFile, default_cache_dir, groups


@dataclass(frozen=True)
class CachedModel:
    repo: str
    revision: str  # commit
    refs: tuple[str, ...]
    quant: str | None
    files: tuple[Path, ...]  # snapshot paths, in part order; files[0] is what loads
    size: int
    last_used: float | None

    @property
    def name(self) -> str:
        return f"{self.repo}:{self.quant}" if self.quant else f"{self.repo}/{self.files[0].name}"


def _usage_file() -> Path:
    import platformdirs

    return Path(os.environ.get("LOCALSPEC_CACHE_DIR") or platformdirs.user_cache_dir("localspec")) / "last-used.json"


def _read_usage() -> dict[str, float]:
    try:
        data = json.loads(_usage_file().read_text())
        return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def touch(path: Path) -> None:
    """Remember that a model file was just used (for ``ls``); never fails a run."""
    try:
        usage = _read_usage()
        usage[str(Path(path).resolve())] = time.time()
        f = _usage_file()
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_suffix(".tmp")
        tmp.write_text(json.dumps(usage))
        tmp.replace(f)
    except OSError:
        pass


def cached_models(cache_dir: Path | None = None) -> list[CachedModel]:
    from huggingface_hub import scan_cache_dir

    cache_dir = cache_dir or default_cache_dir()
    if not cache_dir.is_dir():
        return []
    usage = _read_usage()
    out = []
    for repo in scan_cache_dir(cache_dir).repos:
        if repo.repo_type != "model":
            continue
        for rev in repo.revisions:
            by_path = {f.file_path.relative_to(rev.snapshot_path).as_posix(): f for f in rev.files}
            listing = [RepoFile(p, f.size_on_disk) for p, f in by_path.items()]
            for choice in groups(listing):
                files = [by_path[p.path] for p in choice.parts]
                used = [usage.get(str(f.blob_path.resolve())) for f in files]
                last = max((u for u in used if u), default=None) or max(f.blob_last_accessed for f in files)
                out.append(CachedModel(
                    repo=repo.repo_id, revision=rev.commit_hash, refs=tuple(sorted(rev.refs)),
                    quant=choice.quant, files=tuple(f.file_path for f in files),
                    size=sum(f.size_on_disk for f in files), last_used=last,
                ))
    return sorted(out, key=lambda m: (m.repo.lower(), m.quant or "", m.files[0].name))


def matching(models: list[CachedModel], repo: str, quant: str | None, filename: str | None) -> list[CachedModel]:
    """The cached models a name means: all of a repo, one quant of it, or one file."""
    out = []
    for m in models:
        if m.repo.lower() != repo.lower():
            continue
        if quant and m.quant != quant:
            continue
        if filename and not any(f.as_posix().endswith("/" + filename) for f in m.files):
            continue
        out.append(m)
    return out


def remove(models: list[CachedModel], cache_dir: Path | None = None) -> int:
    """Delete these models' snapshot entries and unreferenced blobs; a repo left with no
    files goes entirely. Returns the bytes freed."""
    cache_dir = cache_dir or default_cache_dir()
    freed = 0
    repos = set()
    for m in models:
        for f in m.files:
            blob = f.resolve()
            f.unlink(missing_ok=True)
            repo_dir = cache_dir / ("models--" + m.repo.replace("/", "--"))
            repos.add(repo_dir)
            still = any(
                p.is_symlink() and p.resolve() == blob for p in (repo_dir / "snapshots").rglob("*")
            )
            if not still and blob.is_file() and blob.parent.name == "blobs":
                freed += blob.stat().st_size
                blob.unlink()
    for repo_dir in repos:
        if not any(p.is_file() for p in (repo_dir / "snapshots").rglob("*")):
            shutil.rmtree(repo_dir, ignore_errors=True)
    return freed


__all__ = ["CachedModel", "Choice", "cached_models", "matching", "remove", "touch"]
