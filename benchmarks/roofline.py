"""This host's floors for the CPU roofline (issue #17, docs/cpu_performance.md): achievable
memory bandwidth (large read / copy / write through torch) and GEMM throughput (the
faster of oneDNN's prepacked linear and, for bf16 on an AMX host, the AMX kernel: the two
the engine's linears run on) at the ``qwen3-75m`` decode and prefill shapes
and a big square one, float32 and bfloat16.

``--shapes`` (default: the real-size presets of ``actorllm bench cpu-vs-vllm``) adds each
preset's own linears (QKV, O, gate-up, down, LM head) in bfloat16 and the preset's dtype at
every M of ``--m``, as ``figures.linear_gemm``: what :mod:`actorllm.bench.roofline_model`
reads to draw each row's floor (``cpu-vs-vllm --roofline``). The LM head only runs the rows
that sample, so it is measured up to the first M at or above the preset's ``max_num_seqs``.

    PYTHONPATH=$PWD python benchmarks/roofline.py --json benchmarks/results/roofline.json

Every figure is the best of ``--repeats`` timed calls (a shared box: the best is the
machine, the rest is the neighbours); a call that takes long stops after ``--budget-s``
seconds of repeats (at least three).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch

from actorllm.bench.machine import result_document, write_json
from actorllm.bench.presets import get_preset
from actorllm.bench.roofline_model import (
    MachineFigures,
    ModelShape,
    RooflineUnavailable,
    preset_floor,
    record_gemm,
)
from actorllm.kernels import amx_linear
from actorllm.models.onednn_linear import few_rows_kernel

# The rows of cpu-vs-vllm at real model sizes: what the roofline percentages are for.
REAL_SIZE_PRESETS = (
    "qwen3-0.6b-bf16-decode",
    "qwen3-0.6b-bf16-prefill",
    "llama-3.2-1b-bf16-decode",
    "llama-3.2-1b-bf16-prefill",
)
M_LADDER = (1, 8, 32, 128, 512, 2048)


def best_ms(fn: Callable[[], object], repeats: int, budget_s: float = float("inf")) -> float:
    """Best of ``repeats`` timed calls after one warm-up; stops early once ``budget_s`` is
    spent and three (or ``repeats``) calls are done."""
    fn()
    best = float("inf")
    start = time.perf_counter()
    for i in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        if i + 1 >= min(3, repeats) and time.perf_counter() - start > budget_s:
            break
    return best * 1e3


def bandwidth(mib: int, repeats: int) -> dict[str, float]:
    """GB/s of a large read (sum), copy (read + write) and write (fill), float32."""
    n = mib * 2**20 // 4
    x = torch.randn(n)
    y = torch.empty(n)
    nbytes = n * 4
    read = best_ms(lambda: x.sum(), repeats)
    copy = best_ms(lambda: y.copy_(x), repeats)
    fill = best_ms(lambda: y.fill_(1.0), repeats)
    return {
        "read_gbs": nbytes / read / 1e6,
        "copy_gbs": 2 * nbytes / copy / 1e6,  # bytes read + bytes written
        "write_gbs": nbytes / fill / 1e6,
    }


def gemm(
    m: int, k: int, n: int, dtype: torch.dtype, repeats: int, budget_s: float = float("inf")
) -> dict[str, float]:
    """x [M, K] @ w[N, K]^T: ms and GFLOP/s of the fastest GEMM this host has for it,
    oneDNN's prepacked linear or, for bf16, this host's few-rows kernel (the AMX kernel,
    kernels/amx_linear.py, or on AVX512-BF16 without AMX kernels/bf16_dot_linear.py):
    each one's GFLOP/s beside (``amx_gflops`` / ``dot_gflops``)."""
    x = torch.randn(m, k).to(dtype)
    w = torch.randn(n, k).to(dtype)
    packed = torch.ops.mkldnn._reorder_linear_weight(w, m)
    linear = torch.ops.mkldnn._linear_pointwise
    ms = best_ms(lambda: linear(x, packed, None, "none", [], ""), repeats, budget_s)
    out = {"ms": ms, "gflops": 2 * m * k * n / ms / 1e6}
    out["onednn_gflops"] = out["gflops"]
    kernel = few_rows_kernel()
    if kernel is not None and kernel.takes(w):
        few = kernel.pack(w)
        few_ms = best_ms(lambda: kernel.linear(x, few, n, None), repeats, budget_s)
        key = "amx_gflops" if kernel is amx_linear else "dot_gflops"
        out[key] = 2 * m * k * n / few_ms / 1e6
        if few_ms < ms:
            out["ms"], out["gflops"] = few_ms, out[key]
    return out


def preset_gemms(
    names: list[str], ladder: list[int], repeats: int, budget_s: float
) -> dict[str, Any]:
    """Every linear of the named presets, bfloat16 and the preset's dtype, at each M of
    ``ladder`` (the LM head up to the first M >= max_num_seqs): the ``linear_gemm`` table.
    A shape two presets share is measured once."""
    jobs: dict[tuple[str, int, int, int], list[str]] = {}  # {(dtype, N, K, M): [used by]}
    for pname in names:
        p = get_preset(pname)
        shape = ModelShape.from_config(p.model_config, p.dtype)
        for dtype in dict.fromkeys(("bfloat16", p.dtype)):
            for lname, (n, k) in shape.linears().items():
                for m in _ladder_for(lname, ladder, p.max_num_seqs):
                    used = jobs.setdefault((dtype, n, k, m), [])
                    used.append(f"{p.model_name} {lname}")
    table: dict[str, Any] = {}
    for (dtype, n, k, m), used_by in jobs.items():
        r = gemm(m, k, n, getattr(torch, dtype), repeats, budget_s)
        label = f"{dtype} M={m} {used_by[0]} [{n}x{k}]"
        print(f"  {label:<48} {r['ms']:9.3f} ms {r['gflops']:8.1f} GFLOP/s")
        for name in dict.fromkeys(used_by):
            record_gemm(table, dtype, name, (n, k), m, r)
    return table


def _ladder_for(linear: str, ladder: list[int], max_num_seqs: int) -> list[int]:
    if linear != "lm_head":
        return ladder
    above = [m for m in ladder if m >= max_num_seqs]
    return [m for m in ladder if m < max_num_seqs] + above[:1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--shapes",
        default=",".join(REAL_SIZE_PRESETS),
        help="comma list of presets whose linears to measure ('' for none; default: "
        f"{','.join(REAL_SIZE_PRESETS)})",
    )
    ap.add_argument(
        "--m",
        default=",".join(map(str, M_LADDER)),
        help=f"rows per GEMM call for --shapes (default {','.join(map(str, M_LADDER))})",
    )
    ap.add_argument(
        "--budget-s", type=float, default=5.0, help="--shapes: seconds of repeats per figure"
    )
    ap.add_argument(
        "--fixed",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the qwen3-75m shapes at M = 128, 1920 and 2048^3 (issue 17's figures)",
    )
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    names = [n.strip() for n in args.shapes.split(",") if n.strip()]
    for n in names:
        get_preset(n)  # an unknown name fails before anything is measured
    try:
        ladder = sorted({int(m) for m in args.m.split(",") if m.strip()})
    except ValueError:
        ladder = []
    if not ladder or ladder[0] < 1:
        ap.error(f"--m: rows per call must be positive integers, got {args.m!r}")
    h, inter, v, qkv = 768, 2048, 32000, 1280  # qwen3-75m
    shapes = {
        "qkv": (qkv, h),
        "o_proj": (h, h),
        "gate_up": (2 * inter, h),
        "down": (h, inter),
        "lm_head": (v, h),
    }
    bw = bandwidth(args.mib, args.repeats)
    print("bandwidth GB/s:", {k: round(x, 1) for k, x in bw.items()})
    gemms: dict[str, dict[str, float]] = {}
    for dtype in (torch.float32, torch.bfloat16) if args.fixed else ():
        dname = str(dtype).removeprefix("torch.")
        for m in (128, 1920):
            for name, (n, k) in shapes.items():
                r = gemm(m, k, n, dtype, args.repeats)
                gemms[f"{dname} M={m} {name} [{n}x{k}]"] = r
        r = gemm(2048, 2048, 2048, dtype, max(3, args.repeats // 3))
        gemms[f"{dname} square 2048"] = r
    for key, r in gemms.items():
        print(f"  {key:<40} {r['ms']:8.3f} ms {r['gflops']:8.1f} GFLOP/s")
    linear_gemm = preset_gemms(names, ladder, args.repeats, args.budget_s)
    figures = {"bandwidth": bw, "gemm": gemms, "linear_gemm": linear_gemm}
    machine = MachineFigures.from_document({"figures": figures})
    for name in names:
        try:
            f = preset_floor(get_preset(name), machine)
        except RooflineUnavailable as e:
            print(f"  floor of {name}: {e}")
            continue
        print(
            f"  floor of {name}: {f.floor_s:.3f} s (prefill {f.prefill_s:.3f}, decode "
            f"{f.decode_s:.3f}: {f.memory_bound_steps}/{f.decode_steps} steps memory bound)"
        )
    if args.json:
        write_json(args.json, result_document("roofline", figures=figures, args=args))


if __name__ == "__main__":
    main()
