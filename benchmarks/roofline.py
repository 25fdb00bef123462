"""This host's floors for the CPU roofline (issue #17, docs/cpu_performance.md): achievable
memory bandwidth (large read / copy / write through torch) and oneDNN GEMM throughput
(prepacked, as the engine's linears run) at the ``qwen3-75m`` decode and prefill shapes
and a big square one, float32 and bfloat16.

    PYTHONPATH=$PWD python benchmarks/roofline.py --json benchmarks/results/roofline.json

Every figure is the best of ``--repeats`` timed calls (a shared box: the best is the
machine, the rest is the neighbours).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from actorllm.bench.machine import result_document, write_json


def best_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
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


def gemm(m: int, k: int, n: int, dtype: torch.dtype, repeats: int) -> dict[str, float]:
    """x [M, K] @ w[N, K]^T through oneDNN's prepacked linear: ms and GFLOP/s."""
    x = torch.randn(m, k).to(dtype)
    w = torch.randn(n, k).to(dtype)
    packed = torch.ops.mkldnn._reorder_linear_weight(w, m)
    linear = torch.ops.mkldnn._linear_pointwise
    ms = best_ms(lambda: linear(x, packed, None, "none", [], ""), repeats)
    return {"ms": ms, "gflops": 2 * m * k * n / ms / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
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
    for dtype in (torch.float32, torch.bfloat16):
        dname = str(dtype).removeprefix("torch.")
        for m in (128, 1920):
            for name, (n, k) in shapes.items():
                r = gemm(m, k, n, dtype, args.repeats)
                gemms[f"{dname} M={m} {name} [{n}x{k}]"] = r
        r = gemm(2048, 2048, 2048, dtype, max(3, args.repeats // 3))
        gemms[f"{dname} square 2048"] = r
    for key, r in gemms.items():
        print(f"  {key:<40} {r['ms']:8.3f} ms {r['gflops']:8.1f} GFLOP/s")
    if args.json:
        write_json(
            args.json,
            result_document("roofline", figures={"bandwidth": bw, "gemm": gemms}, args=args),
        )


if __name__ == "__main__":
    main()
