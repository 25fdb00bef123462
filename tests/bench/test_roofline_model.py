"""bench/roofline_model.py: a tiny model's bytes, FLOPs and floor, worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from actorllm.bench.roofline_model import (
    GemmCurve,
    MachineFigures,
    ModelShape,
    RooflineUnavailable,
    load_machine_figures,
    machine_mismatch,
    percent_of_floor,
    preset_floor,
    record_gemm,
    workload_floor,
)

# hidden 8, 2 layers, 2 query / 1 KV heads of 4, intermediate 16, vocab 48, bf16.
# Per layer: qkv [16x8] 128 + o [8x8] 64 + gate_up [32x8] 256 + down [8x16] 128 = 576 params.
CONFIG = {
    "hidden_size": 8,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 4,
    "intermediate_size": 16,
    "vocab_size": 48,
    "tie_word_embeddings": True,
}
SHAPE = ModelShape.from_config(CONFIG, "bfloat16")
WEIGHT_BYTES = 2 * 576 * 2 + 48 * 8 * 2  # 3072
LINEAR_FLOPS = 2 * 2 * 576  # 2304 per token
LM_HEAD_FLOPS = 2 * 48 * 8  # 768 per sampled row
ATTN_PER_CONTEXT = 4 * 2 * 4 * 2  # 64 per context token
KV_PER_TOKEN = 2 * 2 * 1 * 4 * 2  # 32 bytes
# Two requests: (prompt 2, output 3) decodes 2 steps at contexts 3, 4; (4, 2) one at 5.
REQUESTS = [(2, 3), (4, 2)]


def flat_machine(gflops: float, read_gbs: float, shape: ModelShape = SHAPE) -> MachineFigures:
    """Every linear of ``shape`` at the same rate whatever M."""
    curve = GemmCurve(((1, gflops), (4096, gflops)))
    return MachineFigures(
        read_gbs=read_gbs, gemm={"bfloat16": {nk: curve for nk in shape.linears().values()}}
    )


def floor(machine: MachineFigures, requests: list[tuple[int, int]] = REQUESTS, **kw: int) -> Any:
    limits = {"max_num_seqs": 8, "max_num_batched_tokens": 2048, **kw}
    return workload_floor(SHAPE, "bfloat16", requests, machine, **limits)


def test_bytes_and_flops_of_the_shape() -> None:
    assert SHAPE.layer_linears() == {
        "qkv": (16, 8),
        "o_proj": (8, 8),
        "gate_up": (32, 8),
        "down": (8, 16),
    }
    assert SHAPE.lm_head() == (48, 8)
    assert SHAPE.layer_weight_bytes() == 576 * 2
    assert SHAPE.lm_head_bytes() == 768
    assert SHAPE.weight_bytes() == WEIGHT_BYTES
    assert SHAPE.linear_flops_per_token() == LINEAR_FLOPS
    assert SHAPE.lm_head_flops_per_row() == LM_HEAD_FLOPS
    assert SHAPE.attention_flops(10) == 10 * ATTN_PER_CONTEXT
    assert SHAPE.kv_bytes_per_token() == KV_PER_TOKEN


def test_config_defaults_and_dtype() -> None:
    cfg = {k: v for k, v in CONFIG.items() if k not in ("head_dim", "num_key_value_heads")}
    s = ModelShape.from_config(cfg, "float32")
    assert (s.head_dim, s.kv_heads, s.dtype_bytes) == (4, 2, 4)
    with pytest.raises(ValueError, match="dtype"):
        ModelShape.from_config(CONFIG, "int8")


def test_decode_steps_when_memory_bound() -> None:
    # 1000 bytes/s and 1 GFLOP/s: every step is its bytes.
    f = floor(flat_machine(gflops=1.0, read_gbs=1e-6))
    step1 = WEIGHT_BYTES + (3 + 5) * KV_PER_TOKEN  # both running, contexts 3 and 5
    step2 = WEIGHT_BYTES + 4 * KV_PER_TOKEN  # the second finished: one left, context 4
    assert f.decode_steps == f.memory_bound_steps == 2
    assert f.decode_bytes == step1 + step2 == 6528
    assert f.decode_s == pytest.approx((step1 + step2) / 1000)
    assert f.decode_compute_s == 0
    assert f.bound == "memory"
    assert f.floor_s == pytest.approx(f.prefill_s + f.decode_s)
    decode_flops = 2 * (LINEAR_FLOPS + LM_HEAD_FLOPS) + 8 * ATTN_PER_CONTEXT
    decode_flops += LINEAR_FLOPS + LM_HEAD_FLOPS + 4 * ATTN_PER_CONTEXT
    assert f.decode_flops == decode_flops


def test_decode_steps_when_compute_bound() -> None:
    # 1000 FLOP/s and endless bandwidth: every step is its FLOPs.
    f = floor(flat_machine(gflops=1e-6, read_gbs=1e6))
    step1 = 2 * (LINEAR_FLOPS + LM_HEAD_FLOPS) + 8 * ATTN_PER_CONTEXT  # 7168
    step2 = LINEAR_FLOPS + LM_HEAD_FLOPS + 4 * ATTN_PER_CONTEXT  # 3328
    assert (f.decode_steps, f.memory_bound_steps) == (2, 0)
    assert f.decode_s == f.decode_compute_s == pytest.approx((step1 + step2) / 1000)
    assert f.bound == "compute"


def test_prefill_flops_at_the_flat_rate() -> None:
    f = floor(flat_machine(gflops=1e-6, read_gbs=1e6))
    attention = (1 + 2 + (1 + 2 + 3 + 4)) * ATTN_PER_CONTEXT  # causal: contexts 1..P
    assert f.prefill_flops == 6 * LINEAR_FLOPS + 2 * LM_HEAD_FLOPS + attention == 16192
    assert f.prefill_s == pytest.approx(16.192)
    assert f.flops == f.prefill_flops + f.decode_flops


def test_prefill_at_the_chunk_rate_and_lm_head_at_the_sampled_rows() -> None:
    # Constant time per call between M = 1 and 8: the rate at M is M x 1000 FLOP/s.
    curve = GemmCurve(((1, 1e-6), (8, 8e-6)))
    machine = MachineFigures(
        read_gbs=1e6, gemm={"bfloat16": {nk: curve for nk in SHAPE.linears().values()}}
    )
    f = floor(machine, max_num_batched_tokens=4)
    # layers' linears at M = 4 (chunk), LM head at M = 2 (requests), attention at the peak 8.
    expected = 6 * LINEAR_FLOPS / 4000 + 2 * LM_HEAD_FLOPS / 2000 + 832 / 8000
    assert f.prefill_s == pytest.approx(expected)


def test_max_num_seqs_runs_requests_in_waves() -> None:
    f = floor(flat_machine(gflops=1.0, read_gbs=1e-6), max_num_seqs=1)
    # One at a time: contexts 3, 4 for the first request, then 5 for the second.
    assert f.decode_steps == 3
    assert f.decode_bytes == 3 * WEIGHT_BYTES + (3 + 4 + 5) * KV_PER_TOKEN
    # Three requests, two slots: the third starts when the first (one decode step) is done.
    f = floor(flat_machine(gflops=1.0, read_gbs=1e-6), [(1, 2), (1, 4), (1, 3)], max_num_seqs=2)
    # contexts per step: {a: 2, b: 2}, then {b: 3, c: 2}, then {b: 4, c: 3}
    assert f.decode_steps == 3
    assert f.decode_bytes == 3 * WEIGHT_BYTES + (4 + 5 + 7) * KV_PER_TOKEN


def test_a_single_output_token_has_no_decode() -> None:
    f = floor(flat_machine(gflops=1.0, read_gbs=1.0), [(5, 1)])
    assert (f.decode_steps, f.decode_s, f.decode_bytes) == (0, 0, 0)
    assert f.bound == "compute" and f.floor_s == f.prefill_s > 0


def test_bad_workloads_are_refused() -> None:
    machine = flat_machine(1.0, 1.0)
    with pytest.raises(ValueError, match="empty"):
        floor(machine, [])
    with pytest.raises(ValueError, match="at least 1"):
        floor(machine, [(0, 4)])
    with pytest.raises(ValueError, match="max_num_seqs"):
        floor(machine, max_num_seqs=0)


def test_gemm_curve_interpolates_in_m() -> None:
    c = GemmCurve(((1, 10.0), (8, 80.0), (32, 160.0)))
    assert c.gflops(8) == 80.0
    assert c.gflops(4) == pytest.approx(40.0)
    assert c.gflops(20) == pytest.approx(120.0)
    assert c.gflops(64) == 160.0  # held above the largest M
    assert c.gflops(0.5) == pytest.approx(5.0)  # constant time below the smallest
    assert c.peak() == 160.0


def test_a_missing_shape_names_itself() -> None:
    machine = flat_machine(1.0, 1.0)
    del machine.gemm["bfloat16"][SHAPE.lm_head()]
    with pytest.raises(RooflineUnavailable, match=r"bfloat16 GEMM figures for lm_head \[48x8\]"):
        floor(machine)
    with pytest.raises(RooflineUnavailable, match="float32"):
        workload_floor(
            SHAPE, "float32", REQUESTS, machine, max_num_seqs=8, max_num_batched_tokens=16
        )


def roofline_document(machine: dict[str, Any], rate: float = 1.0) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for name, nk in SHAPE.linears().items():
        for m in (1, 8):
            record_gemm(table, "bfloat16", f"tiny {name}", nk, m, {"ms": 1.0, "gflops": rate * m})
    figures = {"bandwidth": {"read_gbs": 2.0}, "gemm": {}, "linear_gemm": table}
    return json.loads(json.dumps({"machine": machine, "figures": figures}))


MACHINE = {"cpu_model": "Xeon", "isa": {"flags": ["amx_bf16"]}, "torch_threads": 4, "x": 1}


def test_the_document_roofline_py_writes_reads_back() -> None:
    doc = roofline_document(MACHINE)
    machine = MachineFigures.from_document(doc)
    assert machine.read_gbs == 2.0
    assert machine.gemm["bfloat16"][(16, 8)] == GemmCurve(((1, 1.0), (8, 8.0)))
    assert doc["figures"]["linear_gemm"]["bfloat16"]["16x8"]["used_by"] == ["tiny qkv"]
    with pytest.raises(RooflineUnavailable, match="bandwidth"):
        MachineFigures.from_document({"figures": {}})


def test_machine_match() -> None:
    assert machine_mismatch(MACHINE, {**MACHINE, "x": 2, "loadavg": [1.0]}) is None
    other_cpu = machine_mismatch(MACHINE, {**MACHINE, "cpu_model": "AMD EPYC"})
    assert other_cpu == "measured with cpu_model 'Xeon', this run has 'AMD EPYC'"
    other_isa = machine_mismatch(MACHINE, {**MACHINE, "isa": {"flags": ["avx2"]}})
    assert other_isa is not None and "isa" in other_isa
    assert "torch_threads" in str(machine_mismatch(MACHINE, {**MACHINE, "torch_threads": 2}))
    assert "no machine block" in str(machine_mismatch("x86_64, 1 threads", MACHINE))


def test_load_machine_figures(tmp_path: Path) -> None:
    path = tmp_path / "roofline.json"
    path.write_text(json.dumps(roofline_document(MACHINE)))
    assert load_machine_figures(path, MACHINE).read_gbs == 2.0
    with pytest.raises(RooflineUnavailable, match="cpu_model"):
        load_machine_figures(path, {**MACHINE, "cpu_model": "AMD EPYC"})
    with pytest.raises(RooflineUnavailable, match="cannot read"):
        load_machine_figures(tmp_path / "missing.json", MACHINE)
    path.write_text("{")
    with pytest.raises(RooflineUnavailable, match="not JSON"):
        load_machine_figures(path, MACHINE)


def test_percent_of_floor_takes_the_median_run() -> None:
    # 100 output tokens: runs of 1 s, 2 s and 0.5 s; the median run takes 1 s.
    assert percent_of_floor(1.0, 100, [100.0, 50.0, 200.0]) == pytest.approx(100.0)
    assert percent_of_floor(0.5, 100, [50.0, 25.0, 100.0]) == pytest.approx(25.0)
    with pytest.raises(ValueError, match="empty"):
        percent_of_floor(1.0, 100, [])


def test_preset_floor_uses_the_presets_workload() -> None:
    from actorllm.bench.presets import PRESETS

    p = PRESETS["llama-1l-128-256req"]
    shape = ModelShape.from_config(p.model_config, p.dtype)
    curve = GemmCurve(((1, 100.0), (2048, 100.0)))
    machine = MachineFigures(
        read_gbs=10.0, gemm={"float32": {nk: curve for nk in shape.linears().values()}}
    )
    f = preset_floor(p, machine)
    reqs = p.requests()
    # All 256 requests run at once: the steps are the longest output's, less the first token.
    assert f.decode_steps == max(r.output_len for r in reqs) - 1
    assert f.prefill_flops >= sum(len(r.prompt_token_ids) for r in reqs) * (
        shape.linear_flops_per_token()
    )
