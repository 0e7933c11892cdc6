"""The one path from settings to a running Engine: resolve -> plan -> load.

Every command that runs a model (``run``, ``bench``, and next ``serve`` and ``chat``) and
the Python API get their engine from ``open_engine``: it resolves the model and its draft
(downloading into the Hugging Face cache), plans GPU layers and context for this
machine, and loads, retrying with fewer target layers when llama.cpp still runs out of
memory. Progress and notes go to callbacks; nothing here prints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from localspec.errors import OutOfMemory
from localspec.plan import Device, Plan, plan
from localspec.resolve.gguf_info import ModelInfo, read_info
from localspec.resolve.hub import Progress
from localspec.settings import Settings, build, updated

if TYPE_CHECKING:  # the engine imports llama.cpp: only when a model is loaded
    from localspec.engine import Engine, EngineConfig

MAX_TRIES = 3
Note = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def open_engine(
    model: str | Path | Settings | None = None,
    *,
    offline: bool = False,
    progress: Progress | None = None,
    note: Note = _quiet,
    detail: Note = _quiet,
    **settings: Any,
) -> Engine:
    """A running Engine for ``model``: a .gguf path, a Hub name (``org/repo[:QUANT]``), a
    profile name, None (the default profile, else the embedded model), or ``Settings``.
    Keyword arguments are settings (``draft="auto"``, ``slots=2``, ``ctx_size=2048``,
    ``spec="ngram"``, ``kv_type="q8_0"``, ...), checked like flags. ``progress(file,
    done, total)`` follows downloads; ``note`` gets what a user may want to know (no
    draft found, a retry with fewer GPU layers), ``detail`` what --verbose shows (the draft
    --draft auto picked, the memory plan). The engine's ``plan`` and ``settings``
    say what was chosen."""
    if isinstance(model, Settings):
        s = updated(model, settings) if settings else model
    else:
        s = build(str(model) if model is not None else None, {k: (v, "argument") for k, v in settings.items()})
    files = resolve_files(s, offline=offline, progress=progress, note=note, detail=detail)
    return open_files(s, files, plan_files(s, files), note=note, detail=detail)


@dataclass(frozen=True)
class Files:
    """The local GGUF files settings name: the model and its draft (None: n-gram only)."""

    model: Path
    draft: Path | None


def resolve_files(s: Settings, *, offline: bool = False, progress: Progress | None = None,
                  note: Note = _quiet, detail: Note = _quiet) -> Files:
    """Resolve the model and its draft (``--draft auto``: from its pairing), downloading
    what is missing."""
    path = resolve(s.model, offline=offline, progress=progress)
    draft_name = s.draft
    if s.draft == "auto":
        draft_name = auto_draft_name(s.model, offline=offline, note=note)
        if draft_name:
            detail(f"--draft auto: {draft_name}")
    draft_path = resolve(draft_name, offline=offline, progress=progress) if draft_name else None
    return Files(path, draft_path)


def plan_files(s: Settings, files: Files, devices: list[Device] | None = None) -> Plan:
    """The memory plan for these files on this machine's devices (or on ``devices``, the
    memory a server has left beside the models it holds)."""
    return plan_for(files.model, files.draft, ctx_size=s.ctx_size, slots=s.slots, kv_type=s.kv_type,
                    gpu_layers=str(s.gpu_layers), draft_gpu_layers=str(s.draft_gpu_layers), devices=devices)


def open_files(s: Settings, files: Files, layout: Plan, *, note: Note = _quiet, detail: Note = _quiet) -> Engine:
    """Load resolved files with a plan made for them."""
    from localspec.engine import EngineConfig

    from localspec.engine import promptcache

    detail(describe(layout))
    keep = s.prompt_cache and s.prompt_cache_size > 0 and not promptcache.disabled_by_env()
    config = EngineConfig(n_threads=s.threads, draft_model=files.draft, spec=s.spec_config(),
                          prompt_cache_dir=promptcache.default_dir() if keep else None,
                          prompt_cache_size=s.prompt_cache_size)
    engine = load_engine(files.model, config, layout, note)
    engine.plan, engine.settings = layout, s
    return engine


def resolve(name: str | None, *, offline: bool = False, progress: Progress | None = None) -> Path:
    """A model name (path, Hub name, or None for the default) -> a local GGUF file,
    downloaded into the Hugging Face cache where needed."""
    from localspec.resolve import resolve_model
    from localspec.resolve.cache import touch

    path = resolve_model(name, offline=offline, progress=progress)
    touch(path)
    return path


def auto_draft_name(model: str | None, *, offline: bool = False, note: Note = _quiet) -> str | None:
    """What ``--draft auto`` means for this target (None: nothing compatible found, and
    speculation uses n-gram lookup alone)."""
    from localspec.resolve import Hub, looks_like_hub
    from localspec.resolve.pairing import auto_draft, cached_draft_for_file

    hub = Hub.from_env(offline=offline)
    if model is None:
        name = None
    elif looks_like_hub(model):
        name = auto_draft(hub, model)
    else:
        name = cached_draft_for_file(hub, Path(model).expanduser())
    if name is None:
        note(f"--draft auto: no model with {model or 'the default model'}'s tokenizer found; "
             "speculating with n-gram lookup alone")
    return name


def plan_for(
    model: Path | ModelInfo,
    draft: Path | ModelInfo | None,
    *,
    ctx_size: int | None,
    slots: int,
    kv_type: str,
    gpu_layers: str | None = None,
    draft_gpu_layers: str | None = None,
    gpu_memory: int | None = None,
    devices: list[Device] | None = None,
) -> Plan:
    """The plan for these files (or headers read remotely) on this machine's devices,
    on ``devices`` given, or on a GPU of ``gpu_memory`` bytes that is not here."""
    from localspec.devices import detect
    from localspec.plan import parse_layers

    target = model if isinstance(model, ModelInfo) else read_info(model)
    draft_info = draft if isinstance(draft, ModelInfo) or draft is None else read_info(draft)
    return plan(
        target,
        devices if devices is not None else detect(gpu_memory),
        draft=draft_info,
        ctx_size=ctx_size,
        slots=slots,
        kv_type=kv_type,
        gpu_layers=parse_layers(gpu_layers, target),
        draft_gpu_layers=parse_layers(draft_gpu_layers, draft_info) if draft_info else None,
    )


def describe(p: Plan) -> str:
    parts = [f"plan: context {p.ctx_size} x {p.slots} slot(s), KV {p.kv_type}"]
    for role, m in (("target", p.target), ("draft", p.draft)):
        if m is not None:
            parts.append(f"{role} {min(m.gpu_layers, m.n_layer)}/{m.n_layer} layers on GPU")
    return " · ".join(parts + p.notes)


def load_engine(model: Path, config: EngineConfig, p: Plan, note: Note = _quiet) -> Engine:
    """Load with the plan's layers and context; on lack of memory retry with half the
    target's GPU layers, at most MAX_TRIES times."""
    from localspec.engine import Engine

    config = replace(
        config,
        n_ctx=p.ctx_size,
        n_slots=p.slots,
        kv_type=p.kv_type,
        n_gpu_layers=p.target.gpu_layers,
        draft_gpu_layers=p.draft.gpu_layers if p.draft else 0,
    )
    for attempt in range(MAX_TRIES):
        try:
            return Engine(model, config)
        except OutOfMemory:
            if config.n_gpu_layers == 0 or attempt == MAX_TRIES - 1:
                raise OutOfMemory(
                    f"Not enough memory to load {model.name} even with "
                    f"{config.n_gpu_layers} layers on the GPU; lower --ctx-size or --gpu-layers."
                ) from None
            fewer = config.n_gpu_layers // 2
            note(f"out of memory with {config.n_gpu_layers} GPU layers; retrying with {fewer}")
            config = replace(config, n_gpu_layers=fewer)
    raise AssertionError("unreachable")
