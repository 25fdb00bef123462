"""Paged decode attention on CPU, one layer: the native kernel (kernels/csrc/paged_decode.c)
against the torch reference (padded float32 gather + SDPA per group of similar lengths),
float32 and bfloat16 caches.

The shape is the 75M Qwen3 preset's layer by default (12 query heads, 4 KV heads, head_dim
64, the engine's CPU block size; ``--heads``, ``--kv-heads``, ``--head-dim``,
``--block-size`` change it), the cache stored as the engine stores it for this kernel
(block-major, worker/kv_cache.py), with a batch of
decoding requests whose contexts are drawn from U[lo, hi]. Each figure is the median of
``--repeats`` calls after warm-up (and the minimum: on a loaded machine, the undisturbed
call); the two paths alternate call by call, so other load on the machine hits both alike.
Run it with another checkout on PYTHONPATH to measure that checkout's kernel.

    python benchmarks/decode_attention_bench.py
    python benchmarks/decode_attention_bench.py \
        --output-json benchmarks/results/decode_attention.json
    python benchmarks/decode_attention_bench.py --heads 8 --kv-heads 1 --head-dim 256  # Gemma
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import statistics
import sys
import time
from typing import Any
from unittest import mock

import torch

from actorllm.bench.machine import result_document, write_json
from actorllm.engine.config.engine_config import CPU_BLOCK_SIZE
from actorllm.kernels import paged_decode as native_decode
from actorllm.kernels.attention import paged_attention
from actorllm.worker.huge_pages import zeros_on_huge_pages


@dataclasses.dataclass(frozen=True)
class Shape:
    heads: int = 12  # query heads
    kv_heads: int = 4
    head_dim: int = 64
    block_size: int = CPU_BLOCK_SIZE


Tensors6 = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def _inputs(
    batch: int, lo: int, hi: int, dtype: torch.dtype, huge_pages: bool = False,
    shape: Shape = Shape(),
) -> Tensors6:  # fmt: skip
    HQ, HK, D = shape.heads, shape.kv_heads, shape.head_dim
    g = torch.Generator().manual_seed(0)
    lens = torch.randint(lo, hi + 1, (batch,), generator=g, dtype=torch.int32)
    BS = shape.block_size
    per = -(-int(lens.max()) // BS)
    nb = batch * per + 1
    # block-major storage, viewed [NB, BS, Hk, D], as worker/kv_cache.py allocates it
    k = _store(torch.randn(nb, HK, BS, D, generator=g).to(dtype), huge_pages)
    v = _store(torch.randn(nb, HK, BS, D, generator=g).to(dtype), huge_pages)
    table = (torch.randperm(nb - 1, generator=g)[: batch * per] + 1).view(batch, per).int()
    q = torch.randn(batch, HQ, D, generator=g).to(dtype)
    qsl = torch.arange(batch + 1, dtype=torch.int32)
    return q, k, v, qsl, lens, table


def _store(x: torch.Tensor, huge_pages: bool) -> torch.Tensor:
    """[NB, Hk, BS, D] -> the [NB, BS, Hk, D] view of a fresh copy; with ``huge_pages``
    on the 2 MiB pages worker/kv_cache.py asks for (where the OS offers them)."""
    dst = zeros_on_huge_pages(tuple(x.shape), x.dtype) if huge_pages else torch.empty_like(x)
    return dst.copy_(x).permute(0, 2, 1, 3)


def bench(
    batch: int, lo: int, hi: int, dtype: torch.dtype, repeats: int, huge_pages: bool = False,
    shape: Shape = Shape(),
) -> dict[str, Any]:  # fmt: skip
    q, k, v, qsl, lens, table = _inputs(batch, lo, hi, dtype, huge_pages, shape)
    D = shape.head_dim

    def run(native: bool) -> float:
        off = mock.patch.object(native_decode, "supports", lambda cache: False)
        with contextlib.nullcontext() if native else off:
            t0 = time.perf_counter()
            paged_attention(q, k, v, qsl, lens, table, D**-0.5, plan_cache={})
            return time.perf_counter() - t0

    times: dict[bool, list[float]] = {True: [], False: []}
    for i in range(repeats + 3):
        for native in (True, False):
            t = run(native)
            if i >= 3:  # warm-up
                times[native].append(t)
    torch_ms = statistics.median(times[False]) * 1e3
    native_ms = statistics.median(times[True]) * 1e3
    return {
        "dtype": str(dtype).removeprefix("torch."),
        "batch": batch,
        "context": [lo, hi],
        "torch_ms": round(torch_ms, 3),
        "native_ms": round(native_ms, 3),
        "speedup": round(torch_ms / native_ms, 2),
        # Fastest call of each: on a shared machine the median carries others' load, the
        # minimum is the call that ran undisturbed.
        "torch_min_ms": round(min(times[False]) * 1e3, 3),
        "native_min_ms": round(min(times[True]) * 1e3, 3),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, nargs="+", default=[16, 128])
    p.add_argument("--context", type=int, nargs=2, default=[64, 512], metavar=("LO", "HI"))
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--heads", type=int, default=Shape.heads, help="query heads")
    p.add_argument("--kv-heads", type=int, default=Shape.kv_heads)
    p.add_argument("--head-dim", type=int, default=Shape.head_dim)
    p.add_argument("--block-size", type=int, default=Shape.block_size)
    p.add_argument("--output-json", default=None)
    p.add_argument(
        "--huge-pages",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="cache on transparent huge pages where the OS offers them, as the engine does",
    )
    args = p.parse_args(argv)
    shape = Shape(args.heads, args.kv_heads, args.head_dim, args.block_size)
    if shape.heads % shape.kv_heads:
        p.error(f"--heads {shape.heads} is not a multiple of --kv-heads {shape.kv_heads}")
    if not native_decode.supports(torch.empty(1, 1, 1, 1)):
        sys.exit("the native kernel did not build here (see actorllm/kernels/native.py)")
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        for batch in args.batches:
            row = bench(
                batch, args.context[0], args.context[1], dtype, args.repeats, args.huge_pages,
                shape,
            )  # fmt: skip
            rows.append(row)
            print(
                f"{row['dtype']:8s} batch {batch:4d}  torch {row['torch_ms']:8.2f} ms  "
                f"native {row['native_ms']:8.2f} ms  x{row['speedup']:.2f}  "
                f"(min: torch {row['torch_min_ms']:.2f} native {row['native_min_ms']:.2f})"
            )
    if args.output_json:
        doc = result_document(
            "decode_attention_bench",
            figures={"results": rows},
            config={
                "heads": shape.heads,
                "kv_heads": shape.kv_heads,
                "head_dim": shape.head_dim,
                "block_size": shape.block_size,
                "torch_threads": torch.get_num_threads(),
                # Others' jobs share the CPU: the load says how noisy the figures are.
                "load_average_1m": os.getloadavg()[0],
            },
            args=args,
            argv=[
                "python",
                "benchmarks/decode_attention_bench.py",
                *(sys.argv[1:] if argv is None else argv),
            ],
        )
        write_json(args.output_json, doc)


if __name__ == "__main__":
    main()
