"""Decode rows of paged attention through the native CPU kernel (``csrc/paged_decode.c``):
each request's keys and values read from their blocks once, in one pass with an online
softmax, float32 math (a bfloat16 cache widened exactly, an fp8 one through a table of each
byte's value times the layer's scale), q read and the output written in place at the
decode rows — instead of the reference path's padded float32 copy of every
context. Same results as :func:`actorllm.kernels.attention.paged_attention` to float32
rounding (tests/kernels/test_paged_decode.py)."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from typing import Any

import torch

from actorllm.kernels import kv_quant, native

ROW_DTYPES = {torch.float32: 0, torch.bfloat16: 1}  # the kernels' codes for q and out
# ... and for the cache (csrc/kv_rows.h): fp8 caches are widened through tables
KV_DTYPES = {**ROW_DTYPES, torch.float8_e4m3fn: 2, torch.float8_e5m2: 2}
# Extra compiler flags of the build paged_decode() calls: tests set ("-mno-avx512f",) to run
# the portable C path on an AVX-512 host.
_BUILD_FLAGS: tuple[str, ...] = ()

_P, _I64, _I32, _F32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
_ARGTYPES: list[Any] = [
    _P, _I32, _I64, _P, _I32, _I64, _P,  # q, q_bf16, q row stride, out, ..., rows
    _P, _P, _I32, _P, _P,  # k_cache, v_cache, kv dtype, k_lut, v_lut
    _I64, _I64, _I64,  # cache strides: block, slot, head
    _P, _P, _I64,  # seq_lens, block_table, table stride
    _I32, _I32, _I32, _I32, _I32,  # n, hq, hk, d, block_size
    _F32, _I32, _F32, _I32,  # scale, window, softcap, threads
    _P,  # sinks [Hq] float32 (NULL: none)
]  # fmt: skip


@functools.cache
def _kernel(extra_flags: tuple[str, ...] = ()) -> Callable[..., Any] | None:
    lib = native.library("paged_decode", extra_flags)
    if lib is None:
        return None
    fn = lib.paged_decode
    fn.argtypes = _ARGTYPES
    fn.restype = ctypes.c_int
    return fn


def available() -> bool:
    """Whether the kernel built on this machine (it builds on first call)."""
    return _kernel() is not None


def supports(cache: torch.Tensor) -> bool:
    """Whether the kernel serves this cache (:func:`cache_readable`) on this machine (it
    built)."""
    return cache_readable(cache) and _kernel() is not None


def cache_readable(cache: torch.Tensor) -> bool:
    """Whether the native attention kernels (decode and prefill) read this KV cache in
    place: on the CPU, float32, bfloat16 or fp8, each row contiguous."""
    return cache.device.type == "cpu" and cache.dtype in KV_DTYPES and cache.stride(-1) == 1


def rows_readable(x: torch.Tensor) -> bool:
    """Whether the kernel reads (or writes) ``x`` [T, Hq, D] in place: float32 or bfloat16,
    each row's [Hq, D] contiguous (rows may be apart, e.g. q as a view of a fused qkv)."""
    heads_packed = x.stride(1) == x.shape[2] or x.shape[1] == 1
    return x.dtype in ROW_DTYPES and (x.stride(2) == 1 or x.shape[2] == 1) and heads_packed


def paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    softcap: float | None = None,
    *,
    rows: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    sinks: torch.Tensor | None = None,
    kv_scales: tuple[float, float] = (1.0, 1.0),
) -> torch.Tensor | None:
    """One query token per request -> ``out``, or None where the kernel cannot run (check
    :func:`supports` first; None then means it ran out of memory).

    q: [T, Hq, D] (any float dtype; read in place where :func:`rows_readable`), k_cache/v_cache:
    [NB, BS, Hk, D] (same strides), seq_lens: [N] (context length including this token,
    already in the cache), block_table: [N, max_blocks] (int32). ``rows`` ([N] int64): the
    rows of q (and out) that decode, in request order; None: all T (N = T). ``out``: [T, Hq,
    D] (:func:`rows_readable`), only ``rows`` written; None: a new float32 tensor. ``sinks``
    ([Hq], gpt-oss): each head's sink logit in its softmax denominator. ``kv_scales``:
    (k_scale, v_scale) of an fp8 cache (ignored for other dtypes)."""
    fn = _kernel(_BUILD_FLAGS)
    strides = k_cache.stride()
    assert fn is not None and strides == v_cache.stride()
    _, hq, d = q.shape
    _, bs, hk, _ = k_cache.shape
    if not rows_readable(q):
        q = q.to(torch.float32).contiguous()  # [T, Hq, D]
    if out is None:
        out = torch.empty(q.shape, dtype=torch.float32)
    assert rows_readable(out) and out.shape == q.shape
    # A decode step passes its plan's tensors, already as the kernel reads them: the checks
    # below convert nothing then (they run per layer).
    if rows is not None and (rows.dtype != torch.int64 or not rows.is_contiguous()):
        rows = rows.to(torch.int64).contiguous()  # [N]
    n = q.shape[0] if rows is None else rows.shape[0]
    lens = seq_lens
    if lens.dtype != torch.int32 or not lens.is_contiguous():
        lens = lens.to(torch.int32).contiguous()  # [N]
    table = block_table
    if table.dtype != torch.int32 or table.stride(-1) != 1:
        table = table.to(torch.int32).contiguous()  # [N, max_blocks]
    s_block, s_slot, s_head, _ = strides
    if sinks is not None:
        sinks = sinks.to(torch.float32).contiguous()  # [Hq]
        assert sinks.shape == (hq,)
    k_lut, v_lut = kv_tables(k_cache, kv_scales)
    rc = fn(
        q.data_ptr(), ROW_DTYPES[q.dtype], q.stride(0),
        out.data_ptr(), ROW_DTYPES[out.dtype], out.stride(0),
        None if rows is None else rows.data_ptr(),
        k_cache.data_ptr(), v_cache.data_ptr(), KV_DTYPES[k_cache.dtype], k_lut, v_lut,
        s_block, s_slot, s_head,
        lens.data_ptr(), table.data_ptr(), table.stride(0),
        n, hq, hk, d, bs,
        scale, sliding_window or 0, softcap or 0.0, torch.get_num_threads(),
        None if sinks is None else sinks.data_ptr(),
    )  # fmt: skip
    return out if rc == 0 else None


def kv_tables(cache: torch.Tensor, kv_scales: tuple[float, float]) -> tuple[int | None, int | None]:
    """The kernels' k_lut / v_lut pointers: an fp8 cache's widening tables ([256] float32,
    each byte's value times the scale; cached, so they outlive the call), else NULL."""
    if not kv_quant.is_fp8(cache.dtype):
        return None, None
    k, v = (kv_quant.fp8_table(cache.dtype, float(s)) for s in kv_scales)
    return k.data_ptr(), v.data_ptr()
