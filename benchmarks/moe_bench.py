"""Fused MoE on CPU: the torch reference (one grouped GEMM over tokens sorted by expert)
against a naive per-expert loop (HF's style: a boolean mask per expert, gather, run,
scatter), and on CUDA the Triton kernel too.

Shapes are a scaled-down Qwen3-30B-A3B / Mixtral layer (hidden, E experts of size I, top
K); T tokens per call, from decode-sized batches to a prefill chunk. The median of
``--repeats`` timed calls after warm-up is reported per (shape, T, implementation).

    python benchmarks/moe_bench.py
    python benchmarks/moe_bench.py --output-json benchmarks/results/moe_bench.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from actorllm.bench.machine import result_document, write_json
from actorllm.kernels.moe import fused_moe, route_topk

# (name, hidden, experts, intermediate, top_k)
SHAPES = [
    ("qwen3-moe-like", 512, 64, 192, 8),
    ("mixtral-like", 512, 8, 1408, 2),
]


def naive_moe(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """Per expert: find its (token, slot) pairs with a mask, gather, run, scatter-add."""
    out = torch.zeros_like(x)
    inter = w2.shape[2]
    for e in range(w13.shape[0]):
        token, slot = torch.where(topk_ids == e)
        if token.numel() == 0:
            continue
        h = x[token] @ w13[e].t()  # [n, 2I]
        h = F.silu(h[:, :inter]) * h[:, inter:]
        y = (h @ w2[e].t()) * topk_weights[token, slot, None]
        out.index_add_(0, token, y)
    return out


def _time(fn: Callable[[], Any], repeats: int, device: torch.device) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def bench(
    shape: tuple[str, int, int, int, int], tokens: int, repeats: int, device: torch.device
) -> dict[str, Any]:
    name, h, e, i, k = shape
    g = torch.Generator().manual_seed(0)
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    x = torch.randn(tokens, h, generator=g).to(device, dtype)
    w13 = (torch.randn(e, 2 * i, h, generator=g) / h**0.5).to(device, dtype)
    w2 = (torch.randn(e, h, i, generator=g) / i**0.5).to(device, dtype)
    weights, ids = route_topk(torch.randn(tokens, e, generator=g), k, renormalize=True)
    weights, ids = weights.to(device), ids.to(device)
    impls: dict[str, Callable[[], Any]] = {
        "naive_per_expert_ms": lambda: naive_moe(x, w13, w2, weights, ids),
        "torch_grouped_ms": lambda: fused_moe(x, w13, w2, weights, ids),
    }
    if device.type == "cuda":
        from actorllm.kernels.triton.moe import fused_moe as triton_moe

        impls["triton_ms"] = lambda: triton_moe(x, w13, w2, weights, ids)
    row: dict[str, Any] = dict(
        shape=name, hidden=h, experts=e, intermediate=i, top_k=k, tokens=tokens, dtype=str(dtype)
    )
    with torch.no_grad():
        want = naive_moe(x, w13, w2, weights, ids).float()
        for key, fn in impls.items():
            err = (fn().float() - want).abs().max().item()
            row[key] = round(_time(fn, repeats, device), 4)
            row[key.replace("_ms", "_max_abs_err")] = err
    row["speedup_torch_vs_naive"] = round(row["naive_per_expert_ms"] / row["torch_grouped_ms"], 3)
    return row


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tokens", type=int, nargs="+", default=[1, 8, 64, 512])
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--output-json", default=None)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    rows = []
    for shape in SHAPES:
        for t in args.tokens:
            row = bench(shape, t, args.repeats, device)
            rows.append(row)
            extra = f"  triton {row['triton_ms']:8.3f} ms" if "triton_ms" in row else ""
            print(
                f"{row['shape']:15s} T={t:4d}  naive {row['naive_per_expert_ms']:8.3f} ms  "
                f"grouped {row['torch_grouped_ms']:8.3f} ms  "
                f"x{row['speedup_torch_vs_naive']:.2f}{extra}"
            )
    if args.output_json:
        doc = result_document(
            "moe_bench",
            figures={"results": rows},
            config={
                "shapes": SHAPES,
                "device": str(device),
                # Others' jobs share the CPU: the load says how noisy the figures are.
                "load_average_1m": os.getloadavg()[0],
            },
            args=args,
            argv=["python", "benchmarks/moe_bench.py", *(sys.argv[1:] if argv is None else argv)],
        )
        write_json(args.output_json, doc)


if __name__ == "__main__":
    main()
