"""Plan, then load: the one path from files and flags to a running Engine.

Every command that runs a model goes through ``load_engine``: the memory plan decides the
GPU layers and context, and if llama.cpp still runs out of memory the load is retried with
fewer target layers (said through ``note``) before giving up with one sentence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from localspec.engine import Engine, EngineConfig
from localspec.errors import OutOfMemory
from localspec.plan import Plan, plan
from localspec.resolve.gguf_info import ModelInfo, read_info

MAX_TRIES = 3


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
) -> Plan:
    """The plan for these files (or headers read remotely) on this machine's devices, or
    on a GPU of ``gpu_memory`` bytes that is not here."""
    from localspec import devices
    from localspec.plan import parse_layers

    target = model if isinstance(model, ModelInfo) else read_info(model)
    draft_info = draft if isinstance(draft, ModelInfo) or draft is None else read_info(draft)
    return plan(
        target,
        devices.detect(gpu_memory),
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


def load_engine(
    model: Path,
    config: EngineConfig,
    p: Plan,
    note: Callable[[str], None] = lambda s: None,
) -> Engine:
    """Load with the plan's layers and context; on lack of memory retry with half the
    target's GPU layers, at most MAX_TRIES times."""
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
