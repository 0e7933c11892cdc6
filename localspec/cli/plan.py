"""``localspec plan``: where the target's and the draft's layers and KV cache would go."""

from __future__ import annotations

import json
import sys
from typing import Optional

import typer
from rich.table import Table

from localspec.cli._common import (
    MODEL_HELP,
    CtxSize,
    Draft,
    DraftGpuLayers,
    GpuLayers,
    KvType,
    Offline,
    Slots,
    settings_from_context,
    user_errors,
)
from localspec.cli.completion import complete_model
from localspec.outputs import terminal
from localspec.defaults import DEFAULTS as D

HELP = "Show how a model (and its draft) would be laid out on this machine's devices, without loading it."
EPILOG = (
    "Examples:  localspec plan model.gguf  ·  localspec plan 7b.gguf --draft 0.5b.gguf "
    "--gpu-memory 8GiB --ctx-size 32768  ·  localspec plan model.gguf --slots 4 --kv-type q8_0 --json"
)


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB"


def plan_record(p) -> dict:
    def model(m):
        if m is None:
            return None
        return {
            "name": m.name, "n_layer": m.n_layer, "gpu_layers": m.gpu_layers,
            "weights_bytes": m.weights_bytes, "weights_gpu_bytes": m.weights_gpu_bytes,
            "kv_bytes": m.kv_bytes, "kv_gpu_bytes": m.kv_gpu_bytes, "compute_bytes": m.compute_bytes,
        }

    return {
        "target": model(p.target), "draft": model(p.draft), "ctx_size": p.ctx_size, "slots": p.slots,
        "kv_type": p.kv_type,
        "devices": [{"name": d.name, "kind": d.kind, "free_bytes": d.free_bytes, "planned_bytes": d.planned_bytes}
                    for d in p.devices],
        "notes": p.notes,
    }


def _layers(m) -> str:
    on = min(m.gpu_layers, m.n_layer)
    out = " + output" if m.gpu_layers > m.n_layer else ""
    return f"{on}/{m.n_layer}{out} on GPU"


@user_errors
def plan_command(
    ctx: typer.Context,
    model: str = typer.Argument(..., help=MODEL_HELP + " A Hub model is planned from its header, without downloading it.",
                                autocompletion=complete_model),
    draft: Draft = D["draft"],
    ctx_size: CtxSize = D["ctx_size"],
    slots: Slots = D["slots"],
    kv_type: KvType = D["kv_type"],
    gpu_layers: GpuLayers = D["gpu_layers"],
    draft_gpu_layers: DraftGpuLayers = D["draft_gpu_layers"],
    gpu_memory: Optional[str] = typer.Option(None, "--gpu-memory", help="Plan for a GPU of this size instead (e.g. 8GiB)."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
    offline: Offline = False,
) -> None:
    from localspec.devices import parse_size
    from localspec.loader import plan_for

    from localspec.cli._models import auto_draft_name

    s = settings_from_context(ctx, model)
    draft_name = auto_draft_name(s.model, offline=offline) if s.draft == "auto" else s.draft
    p = plan_for(
        header_info(s.model, offline), header_info(draft_name, offline) if draft_name else None,
        ctx_size=s.ctx_size, slots=s.slots, kv_type=s.kv_type,
        gpu_layers=str(s.gpu_layers), draft_gpu_layers=str(s.draft_gpu_layers),
        gpu_memory=parse_size(gpu_memory) if gpu_memory else None,
    )
    if as_json:
        sys.stdout.write(json.dumps(plan_record(p), indent=2) + "\n")
        return
    table = Table(title=f"plan · context {p.ctx_size} x {p.slots} slot(s) · KV {p.kv_type}", title_style="bold")
    for col in ("model", "layers", "weights", "KV cache", "compute", "on GPU", "on CPU"):
        table.add_column(col, justify="left" if col in ("model", "layers") else "right")
    for role, m in (("target", p.target), ("draft", p.draft)):
        if m is not None:
            table.add_row(f"{role}: {m.name}", _layers(m), _gib(m.weights_bytes), _gib(m.kv_bytes),
                          _gib(m.compute_bytes), _gib(m.gpu_bytes), _gib(m.cpu_bytes))
    devices_table = Table(title="devices", title_style="bold")
    for col in ("device", "kind", "free", "planned", "headroom"):
        devices_table.add_column(col, justify="left" if col in ("device", "kind") else "right")
    for d in p.devices:
        devices_table.add_row(d.name, d.kind, _gib(d.free_bytes), _gib(d.planned_bytes), _gib(d.free_bytes - d.planned_bytes))
    out = terminal.stdout_console()
    out.print(table)
    out.print(devices_table)
    for note in p.notes:
        out.print(f"note: {note}")


def header_info(name: str | None, offline: bool):
    """A model's header facts without downloading it: the local file, the cached file,
    or the Hub's copy read with range requests."""
    from pathlib import Path

    from localspec.cli._models import quiet_hub_logs
    from localspec.resolve import Hub, check_gguf, looks_like_hub, parse_hub
    from localspec.resolve.gguf_info import read_info
    from localspec.resolve.local import resolve_model

    if name is not None and looks_like_hub(name):
        quiet_hub_logs()
        return Hub.from_env(offline=offline).inspect(parse_hub(name))[0]
    return read_info(resolve_model(name) if name is None else check_gguf(Path(name).expanduser()))
