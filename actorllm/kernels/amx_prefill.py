"""Prefill rows of paged attention on AMX tiles (``csrc/amx_prefill.c``): bfloat16 q and KV
cache, every request of the step with more than one query token in ONE call per layer, keys
read from their blocks in place, q read and the output written in place.

Why: on an AMX CPU a long prompt's attention ran as torch's flash SDPA at about a third of
the rate the same step's linears reach on the tiles (2-core Xeon, Qwen3-0.6B shape, a
2,048-token prompt: SDPA 23 ms a layer, ~40% of the prefill). Both of attention's products
run on the tiles here; the arithmetic is SDPA's low-precision one (exact q.k products summed
in float32, float32 softmax, P rounded to bfloat16 for P.V), see the C file's header.

Where it applies is detected, never assumed: an x86 CPU reporting ``amx_bf16`` and
AVX512-BF16, a native build with the AMX path, and Linux granting the tile state (asked
once, by :mod:`actorllm.kernels.amx_linear`). Shapes: head size a multiple of 32 up to 256,
a block size a multiple of 16, up to 32 query heads per KV head; no softcap, no sinks (the
callers keep those on the float32 kernel).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from typing import Any

import torch

from actorllm.kernels import amx_linear, native
from actorllm.kernels.paged_decode import rows_readable
from actorllm.kernels.paged_prefill import request_tables

_P, _I64, _I32, _F32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
_ARGTYPES: list[Any] = [
    _P, _I64, _P, _I64,  # q, q row stride, out, out row stride
    _P, _P, _P, _P, _I64, _I32,  # q_start, q_len, seq_lens, block_table, table stride, n
    _P, _P, _I64, _I64, _I64,  # k_cache, v_cache, cache strides: block, slot, head
    _I32, _I32, _I32, _I32,  # hq, hk, d, block_size
    _F32, _I32, _I32,  # scale, window, threads
]  # fmt: skip

# Head sizes the kernel takes: a multiple of the tiles' 32-value step, up to its scratch's.
MAX_HEAD_SIZE = 256
# Query heads per KV head it takes: the 32 lanes of a task.
MAX_GROUP = 32


@functools.cache
def _kernel() -> Callable[..., Any] | None:
    if not amx_linear.available():  # AMX + AVX512-BF16 detected, tile state granted
        return None
    lib = native.library("amx_prefill")
    if lib is None or not lib.amx_prefill_built():
        return None
    fn = lib.amx_prefill
    fn.argtypes = _ARGTYPES
    fn.restype = ctypes.c_int
    return fn


def available() -> bool:
    """Whether the kernel runs on this host."""
    return _kernel() is not None


def supports(q: torch.Tensor, out: torch.Tensor, cache: torch.Tensor) -> bool:
    """Whether the kernel serves this call: bf16 q, out and cache on the CPU, rows readable
    in place, a head size, block size and head group it takes, and it built here."""
    _, hq, d = q.shape
    _, bs, hk, _ = cache.shape
    return (
        q.dtype == torch.bfloat16
        and out.dtype == torch.bfloat16
        and cache.dtype == torch.bfloat16
        and cache.device.type == "cpu"
        and cache.stride(-1) == 1
        and rows_readable(q)
        and rows_readable(out)
        and d % 32 == 0
        and d <= MAX_HEAD_SIZE
        and bs % 16 == 0
        and hq % hk == 0
        and hq // hk <= MAX_GROUP
        and available()
    )


def paged_prefill(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    q_start: torch.Tensor,
    q_len: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    *,
    out: torch.Tensor,
) -> bool:
    """Causal attention of N prefill requests, written into their rows of ``out``; False
    where the kernel could not run (out of memory; check :func:`supports` first).

    q, out: [T, Hq, D] bfloat16, k_cache/v_cache: [NB, BS, Hk, D] bfloat16 (same strides),
    q_start / q_len / seq_lens: [N] (request n owns rows ``q_start[n] ..< q_start[n] +
    q_len[n]``, its query i at position ``seq_lens[n] - q_len[n] + i``), block_table: [N,
    max_blocks], the requests' own rows."""
    fn = _kernel()
    assert fn is not None and k_cache.stride() == v_cache.stride()
    assert out.shape == q.shape
    _, hq, d = q.shape
    _, bs, hk, _ = k_cache.shape
    starts, lens, ctx, table = request_tables(q_start, q_len, seq_lens, block_table)
    s_block, s_slot, s_head, _ = k_cache.stride()
    rc = fn(
        q.data_ptr(), q.stride(0), out.data_ptr(), out.stride(0),
        starts.data_ptr(), lens.data_ptr(), ctx.data_ptr(), table.data_ptr(), table.stride(0),
        starts.shape[0], k_cache.data_ptr(), v_cache.data_ptr(), s_block, s_slot, s_head,
        hq, hk, d, bs, scale, sliding_window or 0, torch.get_num_threads(),
    )  # fmt: skip
    return rc == 0
