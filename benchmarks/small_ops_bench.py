"""Micro-benchmark of the CPU small ops (issue #17) at the qwen3-75m bench's shapes: per call
microseconds of each op as the model calls it (wrapper + kernel), for 128 (decode) and 2048
(prefill) rows, float32 and bfloat16, 1 and 2 threads.

    PYTHONPATH=$PWD python benchmarks/small_ops_bench.py --rows 128,2048 --threads 1,2

Ops: the residual norm [T, 768], the per-head q and k norms of a qkv view ([T, 12, 64],
[T, 4, 64]), rotary on q | k, the three as Qwen3's layer calls them (``qk_norm_rotary``:
the fused entry where the tree has one, else the three calls), SiLU-and-mul [T, 4096] ->
[T, 2048], the KV write. Each figure is the median over ``--rounds`` of the mean of a timed
loop (a shared box: compare medians of interleaved runs).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from actorllm.kernels import elementwise, rotary

H, HQ, HK, D, INTER = 768, 12, 4, 64, 2048


def _time(fn: Callable[[], object], budget_s: float) -> float:
    """Mean seconds per call of a loop that runs ~budget_s."""
    fn()
    n, t0 = 0, time.perf_counter()
    while True:
        for _ in range(10):
            fn()
        n += 10
        el = time.perf_counter() - t0
        if el > budget_s:
            return el / n


def cases(rows: int, dtype: torch.dtype) -> dict[str, Callable[[], object]]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, H, generator=g).to(dtype)  # [T, H]
    res = torch.randn(rows, H, generator=g).to(dtype)
    w = torch.randn(H, generator=g).to(dtype)  # [H]
    qkv = torch.randn(rows, (HQ + 2 * HK) * D, generator=g).to(dtype)  # [T, 1280]
    q = qkv[:, : HQ * D].view(rows, HQ, D)  # [T, 12, 64]
    k = qkv[:, HQ * D : (HQ + HK) * D].view(rows, HK, D)  # [T, 4, 64]
    v = qkv[:, (HQ + HK) * D :].view(rows, HK, D)
    wq, wk = torch.randn(D, generator=g).to(dtype), torch.randn(D, generator=g).to(dtype)
    cache = rotary.build_cos_sin_cache(4096, rotary.rope_inv_freq(D, 1e6))  # [P, 64]
    pos = torch.randint(0, 4096, (rows,), generator=g)  # [T]
    gu = torch.randn(rows, 2 * INTER, generator=g).to(dtype)  # [T, 4096]
    kc = torch.zeros(rows // 16 + 8, 16, HK, D, dtype=dtype)  # [NB, 16, Hk, D]
    vc = torch.zeros_like(kc)
    slots = torch.randperm(kc.shape[0] * 16, generator=g)[:rows]  # [T]
    fused = getattr(elementwise, "cpu_qk_norm_rotary", None)

    def three() -> object:
        qn = elementwise.cpu_rms_norm(q, wq, 1e-6)
        kn = elementwise.cpu_rms_norm(k, wk, 1e-6)
        return elementwise.cpu_apply_rotary(pos, qn, kn, cache)

    def qk() -> object:
        if fused is None:
            return three()
        return fused(pos, q, k, wq, wk, 1e-6, cache)

    return {
        "add_norm": lambda: elementwise.cpu_fused_add_rms_norm(x, res, w, 1e-6),
        "q_norm": lambda: elementwise.cpu_rms_norm(q, wq, 1e-6),
        "k_norm": lambda: elementwise.cpu_rms_norm(k, wk, 1e-6),
        "rotary": lambda: elementwise.cpu_apply_rotary(pos, q, k, cache),
        "qk_norm_rotary": qk,
        "silu_and_mul": lambda: elementwise.cpu_silu_and_mul(gu),
        "write_kv": lambda: elementwise.cpu_write_kv_cache(k, v, kc, vc, slots),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", default="128,2048")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--budget", type=float, default=0.05, help="seconds per timed loop")
    p.add_argument("--ops", default="", help="comma list (default: all)")
    a = p.parse_args()
    for threads in (int(s) for s in a.threads.split(",")):
        torch.set_num_threads(threads)
        for rows in (int(s) for s in a.rows.split(",")):
            for dt in a.dtypes.split(","):
                ops = cases(rows, getattr(torch, dt))
                names = a.ops.split(",") if a.ops else list(ops)
                got: dict[str, list[float]] = {n: [] for n in names}
                for _ in range(a.rounds):
                    for n in names:
                        got[n].append(_time(ops[n], a.budget) * 1e6)
                cells = "  ".join(f"{n} {statistics.median(got[n]):8.1f}" for n in names)
                print(f"threads {threads} rows {rows:5d} {dt:9s} us/call: {cells}", flush=True)


if __name__ == "__main__":
    main()
