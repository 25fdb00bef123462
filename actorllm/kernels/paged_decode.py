"""Decode rows of paged attention through the native CPU kernel (``csrc/paged_decode.c``):
each request's keys and values read from their blocks once, a bfloat16 cache converted a
row at a time, softmax in float32 — instead of the reference path's padded float32 copy of
every context. Same results as :func:`actorllm.kernels.attention.paged_attention` to
float32 rounding (tests/kernels/test_paged_decode.py)."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from typing import Any

import torch

from actorllm.kernels import native

_KV_DTYPES = {torch.float32: 0, torch.bfloat16: 1}

_P, _I64, _I32, _F32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
_ARGTYPES: list[Any] = [
    _P, _P, _P, _P, _I32,  # q, out, k_cache, v_cache, kv_bf16
    _I64, _I64, _I64,  # cache strides: block, slot, head
    _P, _P, _I64,  # seq_lens, block_table, table stride
    _I32, _I32, _I32, _I32, _I32,  # n, hq, hk, d, block_size
    _F32, _I32, _F32, _I32,  # scale, window, softcap, threads
]  # fmt: skip


@functools.cache
def _kernel() -> Callable[..., Any] | None:
    lib = native.library("paged_decode")
    if lib is None:
        return None
    fn = lib.paged_decode
    fn.argtypes = _ARGTYPES
    fn.restype = ctypes.c_int
    return fn


def supports(cache: torch.Tensor) -> bool:
    """Whether the kernel serves this cache (CPU, float32 or bfloat16, rows contiguous) on
    this machine (it built)."""
    return (
        cache.device.type == "cpu"
        and cache.dtype in _KV_DTYPES
        and cache.stride(-1) == 1
        and _kernel() is not None
    )


def paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor | None:
    """One query token per request -> [N, Hq, D] float32, or None where the kernel cannot
    run (check :func:`supports` first; None then means it ran out of memory).

    q: [N, Hq, D] (any float dtype), k_cache/v_cache: [NB, BS, Hk, D] (same strides),
    seq_lens: [N] (context length including this token, already in the cache),
    block_table: [N, max_blocks] (int32)."""
    fn = _kernel()
    assert fn is not None and k_cache.stride() == v_cache.stride()
    n, hq, d = q.shape
    _, bs, hk, _ = k_cache.shape
    qf = q.to(torch.float32).contiguous()  # [N, Hq, D]
    out = torch.empty_like(qf)
    lens = seq_lens.to(torch.int32).contiguous()  # [N]
    table = block_table.to(torch.int32)
    if table.stride(-1) != 1:
        table = table.contiguous()  # [N, max_blocks]
    s_block, s_slot, s_head, _ = k_cache.stride()
    rc = fn(
        qf.data_ptr(), out.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
        _KV_DTYPES[k_cache.dtype], s_block, s_slot, s_head,
        lens.data_ptr(), table.data_ptr(), table.stride(0),
        n, hq, hk, d, bs,
        scale, sliding_window or 0, softcap or 0.0, torch.get_num_threads(),
    )  # fmt: skip
    return out if rc == 0 else None
