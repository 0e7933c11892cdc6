"""A stand-in for the Hugging Face Hub on loopback, for tests (point HF_ENDPOINT at it).

It serves what huggingface_hub and localspec ask for: model info with file metadata
(sizes, LFS sha256), model search, and HEAD / GET / ranged GET of files under
``/{repo}/resolve/{revision}/{path}`` with the Hub's headers (X-Repo-Commit, ETag,
X-Error-Code). It counts requests and bytes, and can misbehave on purpose: drop a
connection part-way, serve corrupt bytes, slow down, or gate a repo behind a token.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse


@dataclass
class Repo:
    files: dict[str, Path | bytes]
    commit: str = ""
    gated: bool = False
    tags: tuple[str, ...] = ("gguf",)

    def __post_init__(self) -> None:
        if not self.commit:
            self.commit = hashlib.sha1("".join(sorted(self.files)).encode()).hexdigest()

    def data(self, path: str) -> bytes:
        value = self.files[path]
        return value if isinstance(value, bytes) else Path(value).read_bytes()

    def size(self, path: str) -> int:
        value = self.files[path]
        return len(value) if isinstance(value, bytes) else Path(value).stat().st_size


@dataclass
class StandinHub:
    repos: dict[str, Repo] = field(default_factory=dict)
    token: str = "hf_standin_token"
    #: path -> number of bytes to send before dropping the connection (once)
    drop_after: dict[str, int] = field(default_factory=dict)
    #: paths served with one byte flipped (their metadata keeps the true sha256)
    corrupt: set[str] = field(default_factory=set)
    #: bytes per second for file bodies (0: as fast as possible)
    throttle: int = 0
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    bytes_served: int = 0
    _sha: dict[tuple[str, str], str] = field(default_factory=dict)

    def sha256(self, repo: str, path: str) -> str:
        key = (repo, path)
        if key not in self._sha:
            self._sha[key] = hashlib.sha256(self.repos[repo].data(path)).hexdigest()
        return self._sha[key]

    def start(self) -> str:
        hub = self

        class Handler(_Handler):
            pass

        Handler.hub = hub
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def reset_counts(self) -> None:
        self.requests.clear()
        self.bytes_served = 0


class _Handler(BaseHTTPRequestHandler):
    hub: StandinHub
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    # -- plumbing

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, obj, status: int = 200) -> None:
        self._send(status, json.dumps(obj).encode(), {"Content-Type": "application/json"})

    def _error(self, status: int, code: str, message: str) -> None:
        self._send(status, json.dumps({"error": message}).encode(),
                   {"Content-Type": "application/json", "X-Error-Code": code, "X-Error-Message": message})

    def _authorised(self, repo: Repo) -> bool:
        return not repo.gated or self.headers.get("Authorization") == f"Bearer {self.hub.token}"

    # -- routes

    def do_HEAD(self) -> None:
        self._route()

    def do_GET(self) -> None:
        self._route()

    def _route(self) -> None:
        url = urlparse(self.path)
        path = unquote(url.path)
        self.hub.requests.append((self.command, path, self.headers.get("Range")))
        if path == "/api/models":
            return self._search(parse_qs(url.query))
        m = re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/(.+))?$", path)
        if m:
            return self._info(m.group(1), m.group(2), "blobs" in parse_qs(url.query))
        m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if m:
            return self._file(m.group(1), m.group(2), m.group(3))
        self._error(404, "EntryNotFound", "no such route")

    def _repo(self, repo_id: str, revision: str | None) -> Repo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(401, "RepoNotFound", f"Repository {repo_id} not found")
            return None
        if not self._authorised(repo):
            self._error(401, "GatedRepo", f"Access to model {repo_id} is restricted.")
            return None
        if revision not in (None, "main", repo.commit):
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return None
        return repo

    def _search(self, query: dict[str, list[str]]) -> None:
        search = (query.get("search") or [""])[0].lower()
        author = (query.get("author") or [None])[0]
        found = [
            {"id": rid, "modelId": rid, "tags": list(r.tags)}
            for rid, r in sorted(self.hub.repos.items())
            if search in rid.lower() and (author is None or rid.split("/")[0] == author)
        ]
        self._json(found)

    def _info(self, repo_id: str, revision: str | None, blobs: bool) -> None:
        repo = self._repo(repo_id, revision)
        if repo is None:
            return
        siblings = []
        for name in sorted(repo.files):
            entry: dict = {"rfilename": name}
            if blobs:
                size = repo.size(name)
                sha = self.hub.sha256(repo_id, name)
                entry.update(size=size, blobId=sha[:40], lfs={"sha256": sha, "size": size, "pointerSize": 134})
            siblings.append(entry)
        self._json({"id": repo_id, "modelId": repo_id, "sha": repo.commit, "private": False,
                    "gated": "auto" if repo.gated else False, "tags": list(repo.tags), "siblings": siblings})

    def _file(self, repo_id: str, revision: str, name: str) -> None:
        repo = self._repo(repo_id, revision)
        if repo is None:
            return
        if name not in repo.files:
            self._error(404, "EntryNotFound", f"{name} does not exist")
            return
        hub = self.hub
        size = repo.size(name)
        sha = hub.sha256(repo_id, name)
        headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{sha}"', "Accept-Ranges": "bytes",
                   "Content-Type": "application/octet-stream"}
        start, end = 0, size - 1
        status = 200
        rng = self.headers.get("Range")
        if rng:
            m = re.match(r"bytes=(\d*)-(\d*)$", rng.strip())
            if not m:
                self._error(416, "RangeNotSatisfiable", "bad range")
                return
            if m.group(1):
                start = int(m.group(1))
                end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
            else:  # suffix range
                start = max(size - int(m.group(2)), 0)
            if start >= size:
                self._send(416, b"", {"Content-Range": f"bytes */{size}"})
                return
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        length = end - start + 1
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        if self.command == "HEAD":
            return
        data = repo.data(name)
        body = bytearray(data[start:end + 1])
        if name in hub.corrupt and body:
            body[len(body) // 2] ^= 0xFF
        drop = hub.drop_after.pop(name, None)
        if drop is not None:
            body = body[:drop]
        chunk = 1 << 16
        for i in range(0, len(body), chunk):
            piece = bytes(body[i:i + chunk])
            try:
                self.wfile.write(piece)
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                return
            hub.bytes_served += len(piece)
            if hub.throttle:
                time.sleep(len(piece) / hub.throttle)
        if drop is not None:
            self.close_connection = True
            try:
                self.connection.shutdown(2)
            except OSError:
                pass
