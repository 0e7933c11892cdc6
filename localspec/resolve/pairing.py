"""Draft pairing: a smaller model that shares the target's tokenizer.

Where a draft may come from, in order: a profile that names this target and a draft;
models of the same family in the Hugging Face cache; the same family on the Hub (the
target's org and the known GGUF publishers), smaller by its size label. A candidate is
accepted only if its tokenizer matches the target's (type, vocab size, BOS/EOS/EOT, a hash
of the token list), read from the two GGUF headers, remotely before any download. The
choice is remembered per target revision.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from localspec.errors import HubError, HubUnreachable, LocalspecError, NotInCache
from localspec.resolve.gguf_info import ModelInfo
from localspec.resolve.hub import Hub
from localspec.resolve.names import HubRef, parse_hub

PUBLISHERS = ("bartowski", "unsloth", "lmstudio-community", "ggml-org", "MaziyarPanahi", "QuantFactory")
MAX_CHECKED = 8
_SIZE = re.compile(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)([BbMm])(?![A-Za-z0-9])")


@dataclass(frozen=True)
class Candidate:
    name: str
    source: str  # profile, cache, hub
    params: int | None = None
    file_bytes: int | None = None
    compatible: bool = False
    why: str = ""


def size_label(repo_name: str) -> tuple[str, float] | None:
    """``Qwen2.5-Coder-1.5B-Instruct-GGUF`` -> (``qwen2.5-coder-{}-instruct``, 1.5e9)."""
    name = re.sub(r"[-_.]gguf$", "", repo_name.split("/")[-1], flags=re.IGNORECASE)
    matches = list(_SIZE.finditer(name))
    if not matches:
        return None
    m = matches[-1]
    scale = 1e9 if m.group(2).lower() == "b" else 1e6
    family = (name[: m.start()] + "{}" + name[m.end():]).lower()
    return family, float(m.group(1)) * scale


def smaller_of_family(target_repo: str, repos: list[str]) -> list[str]:
    """Repos of the target's family with a smaller size label, smallest first."""
    mine = size_label(target_repo)
    if mine is None:
        return []
    out = []
    for repo in dict.fromkeys(repos):
        theirs = size_label(repo)
        if theirs and theirs[0] == mine[0] and theirs[1] < mine[1] and repo != target_repo:
            out.append((theirs[1], repo))
    return [r for _, r in sorted(out)]


def compatible(target: ModelInfo, draft: ModelInfo) -> tuple[bool, str]:
    if target.tokenizer is None or draft.tokenizer is None:
        return False, "a GGUF without a token list"
    diffs = target.tokenizer.differences(draft.tokenizer)
    return (not diffs, "same tokenizer" if not diffs else "; ".join(diffs))


# ----------------------------------------------------------------- where candidates come from


def _from_profiles(target: HubRef) -> list[str]:
    from localspec import profiles

    out = []
    for p in profiles.available():
        model, draft = p.profile.model, p.profile.draft
        if model and draft and draft != "auto":
            try:
                if parse_hub(model).repo.lower() == target.repo.lower():
                    out.append(draft)
            except LocalspecError:
                continue
    return out


def _from_cache(hub: Hub, target: HubRef) -> list[str]:
    from localspec.resolve.cache import cached_models

    repos = [m.repo for m in cached_models(hub.cache_dir)]
    return smaller_of_family(target.repo, repos)


def _from_hub(hub: Hub, target: HubRef) -> list[str]:
    from huggingface_hub import HfApi

    from localspec.resolve.hub import hub_errors

    label = size_label(target.repo)
    if label is None:
        return []
    family = label[0]
    query = family.split("{}")[0].strip("-_. ") or family.replace("{}", "")
    api = HfApi(endpoint=hub.endpoint, token=hub.token)
    org = target.repo.split("/")[0]
    repos: list[str] = []
    for author in dict.fromkeys([org, *PUBLISHERS]):
        with hub_errors(target):
            repos += [m.id for m in api.list_models(search=query, author=author, limit=100)]
    return [r for r in smaller_of_family(target.repo, repos) if "gguf" in r.lower()]


# ----------------------------------------------------------------- choosing


def candidates(hub: Hub, target_name: str, *, search_hub: bool = True) -> tuple[ModelInfo, list[Candidate]]:
    """Every candidate draft for the target, checked, in order of preference."""
    target_ref = parse_hub(target_name)
    target, _, _, _ = hub.inspect(target_ref)
    names: list[tuple[str, str]] = [(n, "profile") for n in _from_profiles(target_ref)]
    names += [(n, "cache") for n in _from_cache(hub, target_ref)]
    if search_hub and not hub.offline:
        try:
            names += [(n, "hub") for n in _from_hub(hub, target_ref)]
        except HubUnreachable:
            pass
    seen, out = set(), []
    for name, source in names:
        key = parse_hub(name).repo.lower()
        if key in seen or key == target_ref.repo.lower():
            continue
        seen.add(key)
        if len(out) >= MAX_CHECKED:
            break
        try:
            info, _, _, _ = hub.inspect(parse_hub(name))
        except (HubError, NotInCache, HubUnreachable) as exc:
            out.append(Candidate(name, source, why=str(exc)))
            continue
        ok, why = compatible(target, info)
        out.append(Candidate(name, source, info.n_params, info.file_bytes, ok, why))
    return target, out


def auto_draft(hub: Hub, target_name: str) -> str | None:
    """The draft ``--draft auto`` means for this target: remembered, or found now."""
    target_ref = parse_hub(target_name)
    listing = hub.listing(target_ref)
    key = f"{listing.repo}@{listing.commit}:{target_ref.quant or target_ref.filename or ''}"
    remembered = _read_cache()
    if key in remembered:
        return remembered[key]["draft"]
    _, found = candidates(hub, target_name)
    choice = next((c for c in found if c.compatible), None)
    if not hub.offline:
        remembered[key] = {"draft": choice.name if choice else None,
                           "checked": [asdict(c) for c in found]}
        _write_cache(remembered)
    return choice.name if choice else None


def _cache_file() -> Path:
    import platformdirs

    return Path(os.environ.get("LOCALSPEC_CACHE_DIR") or platformdirs.user_cache_dir("localspec")) / "pairs.json"


def _read_cache() -> dict:
    try:
        data = json.loads(_cache_file().read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_cache(data: dict) -> None:
    try:
        f = _cache_file()
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(data, indent=1))
    except OSError:
        pass


def cached_draft_for_file(hub: Hub, target_path: Path) -> str | None:
    """For a target given as a file: the smallest model in the HF cache with the same
    tokenizer and at most a quarter of its parameters (no network)."""
    from localspec.resolve.cache import cached_models
    from localspec.resolve.gguf_info import read_info

    target = read_info(target_path)
    best: tuple[int, str] | None = None
    for m in cached_models(hub.cache_dir):
        try:
            info = read_info(m.files[0])
        except LocalspecError:
            continue
        if info.n_params * 4 > target.n_params or not compatible(target, info)[0]:
            continue
        if best is None or info.n_params < best[0]:
            best = (info.n_params, str(m.files[0]))
    return best[1] if best else None
