"""The memory planner on synthetic headers and devices (no hardware, no llama.cpp)."""

from __future__ import annotations

from pathlib import Path

import pytest

from localspec.errors import OutOfMemory
from localspec.plan import GiB, MiB, Device, kv_bytes, plan
from localspec.resolve.gguf_info import ModelInfo


def info(name: str, n_layer: int, n_embd: int, n_head: int, n_head_kv: int, layer_mib: float,
         vocab: int = 152064, output_mib: float = 400, embd_mib: float = 300, ctx: int = 32768) -> ModelInfo:
    hd = n_embd // n_head
    return ModelInfo(
        path=Path(f"/models/{name}.gguf"), architecture="qwen2", name=name, n_layer=n_layer,
        n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, head_dim_k=hd, head_dim_v=hd,
        n_ff=4 * n_embd, n_vocab=vocab, context_length=ctx, file_type=15, file_bytes=0,
        layer_bytes=[int(layer_mib * MiB)] * n_layer, output_bytes=int(output_mib * MiB),
        embedding_bytes=int(embd_mib * MiB),
    )


# Qwen2.5-7B Q4_K_M-like (4.7 GB) and Qwen2.5-0.5B-like shapes
Q7B = info("7b", 28, 3584, 28, 4, layer_mib=140)
Q05B = info("0.5b", 24, 896, 14, 2, layer_mib=12, output_mib=130, embd_mib=90)
CPU = Device("cpu", "cpu", 64 * GiB, 64 * GiB)


def gpu(gib: float) -> Device:
    return Device("gpu0", "gpu", int(gib * GiB), int(gib * GiB))


def test_kv_bytes_formula():
    # 28 layers x 4096 tokens x 4 kv heads x (128 + 128) x 2 bytes
    assert kv_bytes(Q7B, 4096, "f16") == 28 * 4096 * 4 * 256 * 2


def test_8gib_gpu_takes_the_whole_draft_and_part_of_the_target():
    p = plan(Q7B, [CPU, gpu(8)], draft=Q05B, ctx_size=32768, slots=2)
    assert p.draft.gpu_layers == Q05B.n_layer + 1  # all of it, output included
    assert 0 < p.target.gpu_layers <= Q7B.n_layer
    gpu_plan = next(d for d in p.devices if d.kind == "gpu")
    assert gpu_plan.planned_bytes <= 8 * GiB
    assert any("layers fit" in n for n in p.notes)


def test_24gib_gpu_takes_everything():
    p = plan(Q7B, [CPU, gpu(24)], draft=Q05B, ctx_size=32768)
    assert p.target.gpu_layers == Q7B.n_layer + 1 and p.draft.gpu_layers == Q05B.n_layer + 1
    assert p.target.cpu_bytes == Q7B.embedding_bytes  # only the input embeddings stay behind


def test_cpu_only_puts_nothing_on_a_gpu():
    p = plan(Q7B, [CPU], draft=Q05B)
    assert p.target.gpu_layers == 0 and p.draft.gpu_layers == 0
    assert p.devices[0].planned_bytes == p.target.total_bytes + p.draft.total_bytes


def test_kv_type_and_slots_move_the_plan_the_expected_way():
    base = plan(Q7B, [CPU, gpu(8)], ctx_size=16384)
    q8 = plan(Q7B, [CPU, gpu(8)], ctx_size=16384, kv_type="q8_0")
    q4 = plan(Q7B, [CPU, gpu(8)], ctx_size=16384, kv_type="q4_0")
    more = plan(Q7B, [CPU, gpu(8)], ctx_size=16384, slots=4)
    assert base.target.kv_bytes > q8.target.kv_bytes > q4.target.kv_bytes
    assert q4.target.gpu_layers >= q8.target.gpu_layers >= base.target.gpu_layers
    assert more.target.kv_bytes == 4 * base.target.kv_bytes
    assert more.target.gpu_layers < base.target.gpu_layers


def test_a_default_context_is_shrunk_before_layers_move_but_an_asked_one_is_kept():
    big = info("ctx", 28, 3584, 28, 28, layer_mib=140, ctx=131072)  # no GQA: a large KV
    shrunk = plan(big, [CPU, gpu(8)], default_ctx=32768)
    asked = plan(big, [CPU, gpu(8)], ctx_size=32768)
    assert shrunk.ctx_size < 32768 and any("shrunk" in n for n in shrunk.notes)
    assert shrunk.target.gpu_layers > asked.target.gpu_layers
    assert asked.ctx_size == 32768


def test_layer_overrides_are_obeyed():
    p = plan(Q7B, [CPU, gpu(24)], draft=Q05B, gpu_layers=10, draft_gpu_layers=0)
    assert p.target.gpu_layers == 10 and p.draft.gpu_layers == 0


def test_a_context_that_does_not_fit_in_ram_is_one_clear_error():
    small_ram = Device("cpu", "cpu", 8 * GiB, 8 * GiB)
    with pytest.raises(OutOfMemory, match="GiB of CPU memory"):
        plan(Q7B, [small_ram], ctx_size=131072, slots=4)


def test_loading_retries_with_fewer_gpu_layers_then_gives_up(monkeypatch):
    """The retry policy around llama.cpp's out-of-memory failure (the failure itself is
    simulated: no GPU here)."""
    from localspec import loader
    from localspec import engine
    from localspec.engine import EngineConfig

    tries: list[int] = []

    def fake_engine(limit):
        class FakeEngine:
            def __init__(self, path, config):
                tries.append(config.n_gpu_layers)
                if config.n_gpu_layers > limit:
                    raise OutOfMemory("out of memory")
        return FakeEngine

    p = plan(Q7B, [CPU, gpu(24)], gpu_layers=28)
    notes: list[str] = []
    monkeypatch.setattr(engine, "Engine", fake_engine(10))
    loader.load_engine(Path("/models/7b.gguf"), EngineConfig(), p, notes.append)
    assert tries == [28, 14, 7] and len(notes) == 2
    tries.clear()
    monkeypatch.setattr(engine, "Engine", fake_engine(-1))
    with pytest.raises(OutOfMemory, match="even with"):
        loader.load_engine(Path("/models/7b.gguf"), EngineConfig(), p)
    assert tries == [28, 14, 7]
