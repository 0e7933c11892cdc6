"""Hub names -> GGUF files in the standard Hugging Face cache.

Files land where ``hf download`` and llama.cpp put them (``HF_HUB_CACHE``), so each reuses
the others' downloads. huggingface_hub lists the repo (with LFS sizes and sha256) and
builds URLs and headers; ``download`` fetches, resumably. What this module adds: choosing
the quant, split files, the sha256 check, an offline mode that never opens a socket, the
GGUF header of a remote file without its weights, and one sentence for each way the Hub
can say no.

Endpoint, cache, token and offline mode are read from the environment when a ``Hub`` is
made (not when huggingface_hub was imported), so ``HF_ENDPOINT`` / ``HF_HUB_OFFLINE``
set by a test or a profile apply.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from localspec.errors import HubError, HubUnreachable, NotInCache
from localspec.resolve.download import Progress, http_transport_errors
from localspec.resolve.gguf_header import BadHeader, Header, Incomplete
from localspec.resolve.gguf_header import parse as parse_header
from localspec.resolve.gguf_info import ModelInfo, info_from_header, merge, read_header
from localspec.resolve.names import HubRef, safe_id, safe_relative

DEFAULT_ENDPOINT = "https://huggingface.co"
DEFAULT_QUANT = "Q4_K_M"
#: When the repo has no Q4_K_M: the closest in size and quality first.
QUANT_PREFERENCE = (
    "Q4_K_M", "Q4_K_S", "Q4_K", "Q5_K_M", "Q4_0", "Q4_1", "IQ4_XS", "IQ4_NL", "Q5_K_S",
    "Q5_0", "Q5_1", "Q3_K_L", "Q6_K", "Q3_K_M", "IQ3_M", "Q8_0", "Q3_K_S", "IQ3_XS",
    "Q2_K", "IQ2_M", "F16", "BF16", "F32",
)
_QUANT_TAG = re.compile(
    r"(?<![A-Za-z0-9])((?:I?Q[1-8](?:_[A-Z0-9]{1,4}){0,3})|BF16|F16|FP16|F32|MXFP4)(?![A-Za-z0-9])",
    re.IGNORECASE,
)
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)



@dataclass(frozen=True)
class RepoFile:
    path: str
    size: int | None = None
    sha256: str | None = None  # the LFS object id, when the Hub gives it


@dataclass(frozen=True)
class Listing:
    repo: str
    revision: str
    commit: str | None
    files: tuple[RepoFile, ...]
    from_cache: bool = False  # what the local cache holds, not the Hub's whole listing


@dataclass(frozen=True)
class Choice:
    """One model in a repo: a quant, and its file or split parts in order."""

    quant: str | None
    parts: tuple[RepoFile, ...]

    @property
    def size(self) -> int | None:
        sizes = [p.size for p in self.parts]
        return None if None in sizes else sum(sizes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Resolved:
    """A Hub model on disk: ``path`` is what llama.cpp loads (the first part of a split)."""

    ref: HubRef
    repo: str
    commit: str | None
    quant: str | None
    path: Path
    paths: tuple[Path, ...]
    downloaded: bool = False


# ----------------------------------------------------------------- choosing files


def quant_of(filename: str) -> str | None:
    """The quant tag in a GGUF file name (``...-q4_k_m.gguf`` -> ``Q4_K_M``)."""
    stem = _SPLIT.sub("", Path(filename).name)
    stem = re.sub(r"\.gguf$", "", stem, flags=re.IGNORECASE)
    tags = _QUANT_TAG.findall(stem)
    return tags[-1].upper().replace("FP16", "F16") if tags else None


def _is_model_gguf(path: str) -> bool:
    name = Path(path).name.lower()
    return name.endswith(".gguf") and "mmproj" not in name and not name.startswith("imatrix")


def groups(files: tuple[RepoFile, ...] | list[RepoFile]) -> list[Choice]:
    """The models in a repo: single files, and split files gathered into one (in part order)."""
    singles: list[Choice] = []
    splits: dict[str, list[tuple[int, int, RepoFile]]] = {}
    for f in files:
        if not _is_model_gguf(f.path):
            continue
        m = _SPLIT.search(f.path)
        if m:
            splits.setdefault(f.path[: m.start()], []).append((int(m.group(1)), int(m.group(2)), f))
        else:
            singles.append(Choice(quant_of(f.path), (f,)))
    for prefix, parts in splits.items():
        parts.sort(key=lambda t: t[0])
        total = parts[0][1]
        if [p[0] for p in parts] != list(range(1, total + 1)):
            continue  # an incomplete split is not a model
        singles.append(Choice(quant_of(prefix + ".gguf"), tuple(p[2] for p in parts)))
    return sorted(singles, key=lambda c: c.parts[0].path)


def choose(ref: HubRef, listing: Listing) -> Choice:
    models = groups(listing.files)
    if not models:
        raise HubError(f"{listing.repo} has no GGUF model files; localspec runs GGUF models only.")
    if ref.filename is not None:
        for c in models:
            if any(p.path == ref.filename for p in c.parts):
                return c
        raise HubError(f"{listing.repo} has no file {ref.filename}; its GGUF files: {_names(models)}.")
    available = sorted({c.quant for c in models if c.quant}, key=_rank)
    if ref.quant is not None:
        for c in models:
            if c.quant == ref.quant:
                return c
        raise HubError(
            f"{listing.repo} has no {ref.quant} file; available: {', '.join(available) or _names(models)}."
        )
    for quant in sorted(available, key=_rank):
        return next(c for c in models if c.quant == quant)
    if len(models) == 1:
        return models[0]
    raise HubError(f"{listing.repo} has several GGUF files and no quant tags; name one: {_names(models)}.")


def _rank(quant: str) -> tuple[int, str]:
    return (QUANT_PREFERENCE.index(quant) if quant in QUANT_PREFERENCE else len(QUANT_PREFERENCE), quant)


def _names(models: list[Choice]) -> str:
    return ", ".join(c.parts[0].path for c in models[:12]) + (" ..." if len(models) > 12 else "")


# ----------------------------------------------------------------- the Hub


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def default_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    return Path(home).expanduser() / "hub"


@dataclass
class Hub:
    endpoint: str = DEFAULT_ENDPOINT
    cache_dir: Path = field(default_factory=default_cache_dir)
    token: str | None = None  # None: huggingface_hub's own (HF_TOKEN, `hf auth login`)
    offline: bool = False

    @classmethod
    def from_env(cls, offline: bool = False) -> Hub:
        return cls(
            endpoint=(os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/"),
            cache_dir=default_cache_dir(),
            token=os.environ.get("HF_TOKEN") or None,
            offline=offline or _env_true("HF_HUB_OFFLINE"),
        )

    # -- listing

    def listing(self, ref: HubRef) -> Listing:
        """The repo's files at the revision: from the Hub, or from the cache when offline
        (or when the Hub cannot be reached and the cache has the repo)."""
        if self.offline:
            return self.cached_listing(ref)
        try:
            return self._remote_listing(ref)
        except HubUnreachable:
            try:
                return self.cached_listing(ref)
            except NotInCache:
                raise HubUnreachable(
                    f"Cannot reach the Hub at {self.endpoint} to find {ref.repo}, and it is not in the cache."
                ) from None

    def _remote_listing(self, ref: HubRef) -> Listing:
        from huggingface_hub import HfApi

        api = HfApi(endpoint=self.endpoint, token=self.token)
        with hub_errors(ref):
            info = api.model_info(ref.repo, revision=ref.revision, files_metadata=True)
        if not safe_id(info.sha, 40):
            raise HubError(f"The Hub answered for {ref.repo} with an invalid commit id; not caching anything.")
        # names and hashes from the network become paths in the cache: keep only safe ones
        files = tuple(
            RepoFile(s.rfilename, s.size, s.lfs.sha256.lower() if s.lfs and safe_id(s.lfs.sha256.lower(), 64) else None)
            for s in (info.siblings or [])
            if safe_relative(s.rfilename)
        )
        return Listing(ref.repo, ref.revision or "main", info.sha, files)

    def repo_cache(self, repo: str) -> Path:
        return self.cache_dir / ("models--" + repo.replace("/", "--"))

    def cached_listing(self, ref: HubRef) -> Listing:
        root = self.repo_cache(ref.repo)
        revision = ref.revision or "main"
        commit: str | None = None
        if re.fullmatch(r"[0-9a-f]{40}", revision) and (root / "snapshots" / revision).is_dir():
            commit = revision
        elif (root / "refs" / revision).is_file():
            commit = (root / "refs" / revision).read_text().strip()
        snapshot = root / "snapshots" / commit if commit else None
        if snapshot is None or not snapshot.is_dir():
            raise NotInCache(
                f"{ref.repo}{'@' + ref.revision if ref.revision else ''} is not in the cache "
                f"({self.cache_dir}); pull it while online: localspec pull {ref}"
            )
        files = tuple(
            RepoFile(p.relative_to(snapshot).as_posix(), p.stat().st_size)
            for p in sorted(snapshot.rglob("*"))
            if p.is_file()
        )
        return Listing(ref.repo, revision, commit, files, from_cache=True)

    # -- resolving and downloading

    def resolve(self, ref: HubRef, *, download: bool = True, progress: Progress | None = None) -> Resolved:
        """The local files of ``ref``, downloading what is missing (unless ``download`` is
        False, when a missing file is NotInCache)."""
        listing = self.listing(ref)
        try:
            choice = choose(ref, listing)
        except HubError:
            if not listing.from_cache:
                raise
            held = ", ".join(sorted({c.quant or c.parts[0].path for c in groups(listing.files)})) or "no GGUF files"
            raise NotInCache(
                f"{ref} is not in the cache (it holds {held}); pull it while online: localspec pull {ref}"
            ) from None
        paths: list[Path] = []
        fetched = False
        for part in choice.parts:
            local = self._in_snapshot(listing, part.path)
            if local is None:
                if self.offline or not download:
                    raise NotInCache(
                        f"{ref.repo}/{part.path} is not in the cache"
                        + (" (offline mode)" if self.offline else "")
                        + f"; pull it while online: localspec pull {ref}"
                    )
                local = self._download(ref, listing, part, progress)
                fetched = True
            paths.append(local)
        return Resolved(ref, listing.repo, listing.commit, choice.quant, paths[0], tuple(paths), fetched)

    def _in_snapshot(self, listing: Listing, filename: str) -> Path | None:
        if listing.commit is None:
            return None
        path = self.repo_cache(listing.repo) / "snapshots" / listing.commit / filename
        return path if path.is_file() else None

    def _download(self, ref: HubRef, listing: Listing, part: RepoFile, progress: Progress | None) -> Path:
        from huggingface_hub import get_hf_file_metadata, hf_hub_url
        from huggingface_hub.utils import build_hf_headers

        from localspec.resolve.download import fetch_to_cache

        url = hf_hub_url(listing.repo, part.path, revision=listing.commit or listing.revision, endpoint=self.endpoint)
        headers = build_hf_headers(token=self.token)
        etag, size, commit = part.sha256, part.size, listing.commit
        with hub_errors(ref, part.path):
            if etag is None or commit is None:  # not an LFS file: ask the Hub for its etag
                meta = get_hf_file_metadata(url, token=self.token)
                etag, size, commit = meta.etag, meta.size, commit or meta.commit_hash
            if not safe_id(etag) or not safe_id(commit, 40):
                raise HubError(f"The Hub gave no usable version for {listing.repo}/{part.path}; cannot cache it.")
            local = fetch_to_cache(
                url=url, headers=headers, repo_dir=self.repo_cache(listing.repo),
                locks_dir=self.cache_dir / ".locks" / self.repo_cache(listing.repo).name,
                commit=commit, filename=part.path, etag=etag, size=size, sha256=part.sha256,
                label=f"{listing.repo}/{part.path}", progress=progress,
            )
        branch = ref.revision or "main"
        if listing.commit and not re.fullmatch(r"[0-9a-f]{40}", branch):
            ref_file = self.repo_cache(listing.repo) / "refs" / branch
            ref_file.parent.mkdir(parents=True, exist_ok=True)
            ref_file.write_text(listing.commit)
        return local


    # -- headers without the weights

    def inspect(self, ref: HubRef) -> tuple[ModelInfo, Choice, Listing, bool]:
        """The model's GGUF header facts: from the cached file if there is one, else from
        the Hub with range requests for the header alone. The bool: read locally."""
        listing = self.listing(ref)
        choice = choose(ref, listing)
        headers, fetched_remotely = [], False
        for part in choice.parts:
            local = self._in_snapshot(listing, part.path)
            if local is not None:
                headers.append(read_header(local)[0])
            elif self.offline:
                raise NotInCache(f"{ref} is not in the cache (offline mode).")
            else:
                headers.append(self.remote_header(ref, listing, part)[0])
                fetched_remotely = True
        first = self._in_snapshot(listing, choice.parts[0].path) or Path(choice.parts[0].path)
        info = info_from_header(merge(headers[0], headers[1:]), first, choice.size or 0)
        if not info.file_bytes and first.is_file():
            info = replace(info, file_bytes=first.stat().st_size)
        return info, choice, listing, not fetched_remotely

    def remote_header(self, ref: HubRef, listing: Listing, part: RepoFile) -> tuple[Header, int]:
        """Fetch just enough of a remote GGUF to parse its header: 1 MiB, then doubling.
        Returns the header and the bytes fetched."""
        from huggingface_hub import hf_hub_url
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

        url = hf_hub_url(listing.repo, part.path, revision=listing.commit or listing.revision, endpoint=self.endpoint)
        headers = build_hf_headers(token=self.token)
        data = bytearray()
        want = HEADER_FIRST_FETCH
        while True:
            end = want - 1 if part.size is None else min(want, part.size) - 1
            headers["Range"] = f"bytes={len(data)}-{end}"
            with hub_errors(ref, part.path):
                r = get_session().get(url, headers=headers, follow_redirects=True)
                hf_raise_for_status(r)
            chunk = r.content
            if r.status_code == 200:  # the server ignored the range: it sent the whole file
                data = bytearray(chunk)
            else:
                data += chunk
            try:
                return parse_header(data), len(data)
            except Incomplete as exc:
                if not chunk or (part.size is not None and len(data) >= part.size):
                    raise HubError(f"{ref.repo}/{part.path} ends inside its GGUF header.") from None
                want = max(exc.need, 2 * len(data))
            except BadHeader as exc:
                raise HubError(f"{ref.repo}/{part.path} is not a readable GGUF file ({exc}).") from None


HEADER_FIRST_FETCH = 1 << 20


class hub_errors:
    """huggingface_hub's and httpx's exceptions -> one localspec sentence."""

    def __init__(self, ref: HubRef, filename: str | None = None) -> None:
        self.ref, self.filename = ref, filename

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is None or not isinstance(exc, Exception):
            return False
        mapped = map_error(exc, self.ref, self.filename)
        if mapped is None:
            return False
        raise mapped from exc


def map_error(exc: Exception, ref: HubRef, filename: str | None = None) -> Exception | None:
    from huggingface_hub import errors as hf

    what = ref.repo + (f"/{filename}" if filename else "")
    login = "set HF_TOKEN or run `hf auth login`"
    if isinstance(exc, hf.GatedRepoError):
        return HubError(f"{ref.repo} is gated: accept its conditions on the Hub, then {login}.")
    if isinstance(exc, hf.RevisionNotFoundError):
        return HubError(f"{ref.repo} has no revision {ref.revision!r}.")
    if isinstance(exc, hf.RepositoryNotFoundError):
        return HubError(f"No model {ref.repo} on the Hub (if it is private, {login}).")
    if isinstance(exc, (hf.EntryNotFoundError, getattr(hf, "RemoteEntryNotFoundError", ()))):
        return HubError(f"{what} is not on the Hub.")
    if isinstance(exc, hf.OfflineModeIsEnabled):
        return NotInCache(f"{what} is not in the cache (offline mode).")
    if isinstance(exc, hf.LocalEntryNotFoundError):
        return HubUnreachable(f"Cannot reach the Hub to download {what}, and it is not in the cache.")
    if isinstance(exc, hf.HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else None
        if status in (401, 403):
            return HubError(f"The Hub refused access to {what} (HTTP {status}); {login}.")
        return HubUnreachable(f"The Hub answered HTTP {status} for {what}; try again later.")
    if isinstance(exc, http_transport_errors()):
        return HubUnreachable(f"Cannot reach the Hub at {_endpoint_of(exc)} for {what}.")
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return HubUnreachable(f"Cannot reach the Hub for {what}: {exc}.")
    return None


def _endpoint_of(exc: Exception) -> str:
    request = getattr(exc, "_request", None) or getattr(exc, "request", None)
    try:
        url = request.url  # type: ignore[union-attr]
        return f"{url.scheme}://{url.netloc.decode() if isinstance(url.netloc, bytes) else url.netloc}"
    except Exception:
        return os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
