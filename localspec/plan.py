"""Memory planning: which layers of the target and the draft go on the GPU, and what the
KV cache for the asked context and slots costs. Pure: headers and devices in, numbers
out, no llama.cpp, so it is tested without hardware.

Order of preference: the draft entirely on the GPU (a draft on the CPU slows every step),
then as many target layers as fit; a context the user did not ask for is shrunk (to no
less than 2048 tokens, and said so) before target layers are moved off the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from localspec.errors import OutOfMemory
from localspec.resolve.gguf_info import ModelInfo

MiB = 1 << 20
GiB = 1 << 30
KV_BYTES_PER_ELEMENT = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}
GPU_RESERVE = 512 * MiB  # driver, context and fragmentation headroom on a GPU
MIN_SHRUNK_CTX = 2048


@dataclass(frozen=True)
class Device:
    name: str
    kind: str  # cpu, gpu, igpu, accel
    free_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class ModelPlan:
    name: str
    n_layer: int
    gpu_layers: int  # repeating layers on the GPU; n_layer + 1 means the output layer too
    weights_bytes: int
    weights_gpu_bytes: int
    kv_bytes: int
    kv_gpu_bytes: int
    compute_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.compute_bytes

    @property
    def gpu_bytes(self) -> int:
        return self.weights_gpu_bytes + self.kv_gpu_bytes + (self.compute_bytes if self.gpu_layers else 0)

    @property
    def cpu_bytes(self) -> int:
        return self.total_bytes - self.gpu_bytes


@dataclass(frozen=True)
class DevicePlan:
    name: str
    kind: str
    free_bytes: int
    planned_bytes: int


@dataclass(frozen=True)
class Plan:
    target: ModelPlan
    draft: ModelPlan | None
    ctx_size: int
    slots: int
    kv_type: str
    devices: list[DevicePlan]
    notes: list[str] = field(default_factory=list)


def kv_bytes(info: ModelInfo, n_tokens: int, kv_type: str, layers: int | None = None) -> int:
    """K and V for ``n_tokens`` positions over ``layers`` layers (default: all)."""
    per_token = info.n_head_kv * (info.head_dim_k + info.head_dim_v) * KV_BYTES_PER_ELEMENT[kv_type]
    return int((info.n_layer if layers is None else layers) * n_tokens * per_token)


def compute_bytes(info: ModelInfo, n_ubatch: int = 512) -> int:
    """llama.cpp's compute buffer, roughly: logits and activations of one micro-batch."""
    return int(4 * n_ubatch * (info.n_vocab + 4 * max(info.n_ff, info.n_embd)))


def _model_plan(info: ModelInfo, gpu_layers: int, n_tokens: int, kv_type: str) -> ModelPlan:
    gpu_layers = max(0, min(gpu_layers, info.n_layer + 1))
    on_gpu = min(gpu_layers, info.n_layer)
    weights_gpu = sum(info.layer_bytes[info.n_layer - on_gpu :]) if on_gpu else 0
    if gpu_layers > info.n_layer:
        weights_gpu += info.output_bytes
    return ModelPlan(
        name=info.name,
        n_layer=info.n_layer,
        gpu_layers=gpu_layers,
        weights_bytes=info.weights_bytes,
        weights_gpu_bytes=weights_gpu,
        kv_bytes=kv_bytes(info, n_tokens, kv_type),
        kv_gpu_bytes=kv_bytes(info, n_tokens, kv_type, on_gpu),
        compute_bytes=compute_bytes(info),
    )


def _layers_that_fit(info: ModelInfo, budget: int, n_tokens: int, kv_type: str) -> int:
    """The most GPU layers (n_layer + 1 = all, output included) within ``budget`` bytes."""
    best = 0
    for layers in range(1, info.n_layer + 2):
        if _model_plan(info, layers, n_tokens, kv_type).gpu_bytes <= budget:
            best = layers
        else:
            break
    return best


def parse_layers(value: str | None, info: ModelInfo) -> int | None:
    """--gpu-layers: auto (None), all, or a count."""
    if value is None or value == "auto":
        return None
    if value == "all":
        return info.n_layer + 1
    n = int(value)
    if n < 0:
        raise ValueError("must be auto, all or a number >= 0")
    return min(n, info.n_layer + 1)


def plan(
    target: ModelInfo,
    devices: list[Device],
    *,
    draft: ModelInfo | None = None,
    ctx_size: int | None = None,
    slots: int = 1,
    kv_type: str = "f16",
    gpu_layers: int | None = None,
    draft_gpu_layers: int | None = None,
    default_ctx: int = 4096,
) -> Plan:
    notes: list[str] = []
    asked = ctx_size is not None
    ctx = ctx_size or min(target.context_length or default_ctx, default_ctx)
    gpus = [d for d in devices if d.kind in ("gpu", "igpu")]
    cpu = next((d for d in devices if d.kind == "cpu"), None)
    gpu = max(gpus, key=lambda d: d.free_bytes) if gpus else None
    budget = max(0, gpu.free_bytes - GPU_RESERVE) if gpu else 0

    def attempt(ctx: int) -> tuple[ModelPlan, ModelPlan | None]:
        n_tokens = ctx * slots
        left = budget
        dplan = None
        if draft is not None:
            want = draft_gpu_layers
            if want is None:
                full = _model_plan(draft, draft.n_layer + 1, n_tokens, kv_type)
                want = draft.n_layer + 1 if full.gpu_bytes <= left else _layers_that_fit(draft, left, n_tokens, kv_type)
            dplan = _model_plan(draft, want if gpu else 0, n_tokens, kv_type)
            left -= dplan.gpu_bytes
        want_t = gpu_layers if gpu_layers is not None else _layers_that_fit(target, max(0, left), n_tokens, kv_type)
        return _model_plan(target, want_t if gpu else 0, n_tokens, kv_type), dplan

    tplan, dplan = attempt(ctx)
    if gpu and not asked and gpu_layers is None and tplan.gpu_layers <= target.n_layer:
        best = (tplan, dplan, ctx)
        c = ctx
        while c // 2 >= MIN_SHRUNK_CTX and best[0].gpu_layers <= target.n_layer:
            c //= 2
            t2, d2 = attempt(c)
            if t2.gpu_layers > best[0].gpu_layers:
                best = (t2, d2, c)
        if best[2] != ctx:
            notes.append(f"context shrunk from {ctx} to {best[2]} tokens to keep more layers on the GPU")
        tplan, dplan, ctx = best
    if gpu and tplan.gpu_layers <= target.n_layer:
        notes.append(f"target: {tplan.gpu_layers} of {target.n_layer} layers fit on {gpu.name}; the rest run on the CPU")
    if dplan is not None and gpu and dplan.gpu_layers <= draft.n_layer:
        notes.append("the draft does not fit on the GPU entirely: every draft step will be slow")
    cpu_need = tplan.cpu_bytes + (dplan.cpu_bytes if dplan else 0)
    if cpu is not None and cpu_need > cpu.free_bytes:
        raise OutOfMemory(
            f"This needs {cpu_need / GiB:.1f} GiB of CPU memory for a context of {ctx} x {slots} "
            f"tokens but {cpu.free_bytes / GiB:.1f} GiB is free; lower --ctx-size or --slots, "
            "or use --kv-type q8_0."
        )
    gpu_need = tplan.gpu_bytes + (dplan.gpu_bytes if dplan else 0)
    device_plans = []
    for d in devices:
        planned = gpu_need if d is gpu else (cpu_need if d is cpu else 0)
        device_plans.append(DevicePlan(d.name, d.kind, d.free_bytes, planned))
    return Plan(tplan, dplan, ctx, slots, kv_type, device_plans, notes)
