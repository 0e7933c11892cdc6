"""What a model name means, decided from the text alone: a Hub reference or a local path.

Hub names take the forms llama.cpp's ``-hf`` and Ollama's ``hf.co/...`` take::

    org/repo                 the default quant (Q4_K_M, else the closest)
    org/repo:Q8_0            a quant, case-insensitive
    org/repo/dir/file.gguf   one file
    ...@revision             a branch, tag or commit, before or after the quant

Anything that could escape the cache (``..``, absolute or empty components, backslashes,
control characters) is refused here, before a byte touches the disk or the network.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from localspec.errors import InvalidModelName

_PREFIXES = ("hf://", "https://huggingface.co/", "huggingface.co/", "hf.co/")
_ID_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_QUANT = re.compile(r"^[A-Za-z0-9_]{1,32}$")
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,254}$")
_FILE_PART = re.compile(r"^[^\x00-\x1f\\:*?\"<>|]{1,255}$")


@dataclass(frozen=True)
class HubRef:
    """A model on the Hub, as named: the repo, and at most one of quant and filename."""

    repo: str
    quant: str | None = None
    filename: str | None = None
    revision: str | None = None

    def __str__(self) -> str:
        s = self.repo + (f"/{self.filename}" if self.filename else "")
        s += f"@{self.revision}" if self.revision else ""
        return s + (f":{self.quant}" if self.quant else "")


def looks_like_path(name: str) -> bool:
    """An explicit path (``./x``, ``~/x``, ``/x``, ``C:\\x``) or an existing file."""
    if name.startswith(("/", "./", "../", "~", ".\\", "..\\")) or re.match(r"^[A-Za-z]:[\\/]", name):
        return True
    try:
        return Path(name).expanduser().exists()
    except OSError:  # a name too long to be a path
        return False


def looks_like_hub(name: str) -> bool:
    stripped = _strip_prefix(name)
    return stripped != name or (stripped.count("/") >= 1 and not looks_like_path(name))


def _strip_prefix(name: str) -> str:
    for prefix in _PREFIXES:
        if name.lower().startswith(prefix):
            return name[len(prefix):]
    return name


def _refuse(name: str, why: str) -> InvalidModelName:
    return InvalidModelName(f"{name!r} is not a valid Hub model name: {why}.")


def parse_hub(name: str) -> HubRef:
    """``org/repo[/file.gguf][@revision][:QUANT]`` (or ``:QUANT@revision``) -> HubRef."""
    text = _strip_prefix(name.strip())
    if any(ord(c) < 32 for c in text) or "\\" in text:
        raise _refuse(name, "it contains a backslash or a control character")
    if text.count("@") > 1 or text.count(":") > 1:
        raise _refuse(name, "it has more than one @revision or :QUANT")
    path, at, revision = text.partition("@")
    quant = None
    if ":" in revision:
        revision, _, quant = revision.partition(":")
    if ":" in path:
        path, _, quant = path.partition(":")
    revision = revision if at else None
    parts = path.split("/")
    if len(parts) < 2:
        raise _refuse(name, "use org/repo, org/repo:QUANT or org/repo/file.gguf")
    for part in parts:
        if part in ("", ".", ".."):
            raise _refuse(name, "it has an empty, '.' or '..' component")
    org, repo, file_parts = parts[0], parts[1], parts[2:]
    for part in (org, repo):
        if not _ID_PART.match(part) or ".." in part or "--" in part:
            raise _refuse(name, f"{part!r} is not a valid organisation or repository name")
    for part in file_parts:
        if not _FILE_PART.match(part):
            raise _refuse(name, f"{part!r} is not a valid file name")
    filename = "/".join(file_parts) or None
    if filename is not None and not filename.lower().endswith(".gguf"):
        raise _refuse(name, "a file in a repo must be a .gguf file")
    if quant is not None and (not _QUANT.match(quant)):
        raise _refuse(name, f"{quant!r} is not a quantisation tag such as Q4_K_M")
    if quant is not None and filename is not None:
        raise _refuse(name, "name either a file or a quant, not both")
    if revision is not None and (not _REVISION.match(revision) or ".." in revision or "//" in revision):
        raise _refuse(name, f"{revision!r} is not a valid revision")
    return HubRef(
        repo=f"{org}/{repo}", quant=quant.upper() if quant else None, filename=filename, revision=revision
    )


def safe_relative(path: str) -> bool:
    """A path from the Hub's answer that stays inside the cache folder it is put in."""
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and all(
        p not in ("", ".", "..") and _FILE_PART.match(p) for p in parts
    )


def safe_id(value: str | None, length: int | None = None) -> bool:
    """A commit hash or etag from the Hub, used as a file name: hex only."""
    return bool(value) and re.fullmatch(r"[0-9a-f]+", value or "") is not None and (length is None or len(value) == length)
