"""Downloading one file into the Hugging Face cache, resumable across processes.

huggingface_hub 2.x downloads into a per-process temporary file that it deletes on any
failure, so a Ctrl-C or a dropped connection at 90% of a 5 GB file starts again from
zero. This keeps the cache layout and lock files of huggingface_hub (``blobs/<etag>``,
``snapshots/<commit>/<file>`` as a relative link, ``refs/<branch>``,
``.locks/models--org--repo/<etag>.lock``), so either tool reuses the other's files, but
writes to ``blobs/<etag>.incomplete`` and resumes it with a Range request, in this
process after a dropped connection and in the next one after Ctrl-C. The sha256 is
computed while writing and checked before the blob is moved into place.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from localspec.errors import HubError

CHUNK = 1 << 20
RETRIES = 5

Progress = Callable[[str, int, "int | None"], None]  # (file, bytes done, total)


def http_transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP client's connection-level errors: httpx2 under huggingface_hub 2, httpx under 1.x."""
    import importlib

    found: list[type[BaseException]] = []
    for module in ("httpx2", "httpx"):
        try:
            found.append(importlib.import_module(module).TransportError)
        except (ImportError, AttributeError):
            pass
    return tuple(found)


def transport_errors() -> tuple[type[BaseException], ...]:
    return (ConnectionError, TimeoutError, *http_transport_errors())


def fetch_to_cache(
    *,
    url: str,
    headers: dict[str, str],
    repo_dir: Path,
    locks_dir: Path,
    commit: str,
    filename: str,
    etag: str,
    size: int | None,
    sha256: str | None,
    label: str,
    progress: Progress | None = None,
) -> Path:
    """Download ``url`` as blob ``etag`` and link it as ``snapshots/<commit>/<filename>``."""
    from filelock import FileLock

    blobs = repo_dir / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    blob = blobs / etag
    pointer = repo_dir / "snapshots" / commit / filename
    locks_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(locks_dir / f"{etag}.lock")):
        if not blob.is_file():
            incomplete = blobs / f"{etag}.incomplete"
            digest = _fetch(url, headers, incomplete, size, filename, progress)
            if sha256 and digest != sha256.lower():
                incomplete.unlink(missing_ok=True)
                raise HubError(
                    f"The download of {label} does not match its published sha256 "
                    f"(expected {sha256[:12]}..., got {digest[:12]}...); the file was deleted, pull it again."
                )
            os.chmod(incomplete, 0o644)
            incomplete.replace(blob)
        _link(blob, pointer)
    return pointer


def _fetch(url: str, headers: dict[str, str], incomplete: Path, size: int | None, label: str,
           progress: Progress | None) -> str:
    # label: the name progress is reported under
    """Append to ``incomplete`` until it is whole; returns its sha256."""
    from huggingface_hub.utils import get_session, hf_raise_for_status

    digest = hashlib.sha256()
    have = 0
    if incomplete.exists():  # hash what an earlier run left, then ask for the rest
        with open(incomplete, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                digest.update(chunk)
                have += len(chunk)
    if size is not None and have > size:  # not ours to resume
        incomplete.unlink()
        digest, have = hashlib.sha256(), 0
    if progress:
        progress(label, have, size)
    failures = 0
    errors = transport_errors()
    while size is None or have < size:
        request_headers = dict(headers)
        if have:
            request_headers["Range"] = f"bytes={have}-"
        try:
            with get_session().stream("GET", url, headers=request_headers, follow_redirects=True) as r:
                hf_raise_for_status(r)
                if have and r.status_code != 206:  # the server sent the whole file again
                    incomplete.unlink()
                    digest, have = hashlib.sha256(), 0
                with open(incomplete, "ab") as f:
                    for chunk in r.iter_bytes(CHUNK):
                        f.write(chunk)
                        f.flush()
                        digest.update(chunk)
                        have += len(chunk)
                        failures = 0
                        if progress:
                            progress(label, have, size)
            if size is None:
                break
            if have < size:
                raise ConnectionError(f"connection closed at {have} of {size} bytes")
        except errors:
            failures += 1
            if failures > RETRIES:
                raise
            time.sleep(min(2 ** failures * 0.25, 4))
    return digest.hexdigest()


def _link(blob: Path, pointer: Path) -> None:
    """A relative symlink, as huggingface_hub makes (a copy where links are not allowed)."""
    pointer.parent.mkdir(parents=True, exist_ok=True)
    if pointer.is_symlink() or pointer.exists():
        pointer.unlink()
    try:
        pointer.symlink_to(os.path.relpath(blob, pointer.parent))
    except OSError:
        shutil.copyfile(blob, pointer)
