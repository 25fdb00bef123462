"""Prefill rows of paged attention through the native CPU kernel (``csrc/paged_prefill.c``):
every request of the step with more than one query token in ONE call per layer, its keys and
values read from their blocks in place (no padded float32 copy of the context, no float
mask), q read and the output written in place, float32 math with an online softmax over
key tiles, causal keys past a query tile never read. Same results as the SDPA path of
:func:`actorllm.kernels.attention.paged_attention` to float32 rounding
(tests/kernels/test_paged_prefill.py)."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from typing import Any

import torch

from actorllm.kernels import native
from actorllm.kernels.paged_decode import (
    KV_DTYPES,
    ROW_DTYPES,
    cache_readable,
    kv_tables,
    rows_readable,
)

# Extra compiler flags of the build paged_prefill() calls: tests set ("-mno-avx512f",) to run
# the portable C path on an AVX-512 host.
_BUILD_FLAGS: tuple[str, ...] = ()

_P, _I64, _I32, _F32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
_ARGTYPES: list[Any] = [
    _P, _I32, _I64, _P, _I32, _I64,  # q, q_bf16, q row stride, out, out_bf16, out row stride
    _P, _P, _P, _P, _I64, _I32,  # q_start, q_len, seq_lens, block_table, table stride, n
    _P, _P, _I32, _P, _P,  # k_cache, v_cache, kv dtype, k_lut, v_lut
    _I64, _I64, _I64,  # cache strides: block, slot, head
    _I32, _I32, _I32, _I32,  # hq, hk, d, block_size
    _F32, _I32, _F32, _I32,  # scale, window, softcap, threads
    _P,  # sinks [Hq] float32 (NULL: none)
    _I32,  # pv_from: rows at this position on take P.V on bf16 pairs (-1: none)
]  # fmt: skip


@functools.cache
def _kernel(extra_flags: tuple[str, ...] = ()) -> Callable[..., Any] | None:
    lib = native.library("paged_prefill", extra_flags)
    if lib is None:
        return None
    fn = lib.paged_prefill
    fn.argtypes = _ARGTYPES
    fn.restype = ctypes.c_int
    return fn


def supports(q: torch.Tensor, out: torch.Tensor, cache: torch.Tensor) -> bool:
    """Whether the kernel serves this call: the cache readable in place
    (:func:`cache_readable`), q and out too (:func:`rows_readable`), and it built here."""
    return (
        cache_readable(cache)
        and rows_readable(q)
        and rows_readable(out)
        and _kernel(_BUILD_FLAGS) is not None
    )


def request_tables(
    q_start: torch.Tensor, q_len: torch.Tensor, seq_lens: torch.Tensor, block_table: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The per-request arguments as the native prefill kernels read them: first q rows,
    query tokens, context lengths [N] int32 contiguous, block tables [N, max_blocks] int32
    with contiguous rows."""
    table = block_table.to(torch.int32)
    if table.stride(-1) != 1:
        table = table.contiguous()  # [N, max_blocks]
    return (
        q_start.to(torch.int32).contiguous(),  # [N]
        q_len.to(torch.int32).contiguous(),  # [N]
        seq_lens.to(torch.int32).contiguous(),  # [N]
        table,
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
    softcap: float | None = None,
    *,
    out: torch.Tensor,
    sinks: torch.Tensor | None = None,
    kv_scales: tuple[float, float] = (1.0, 1.0),
    bf16_pv_from: int | None = None,
) -> bool:
    """Causal attention of N prefill requests, written into their rows of ``out``; False
    where the kernel could not run (out of memory; check :func:`supports` first).

    q, out: [T, Hq, D] (:func:`rows_readable`; out in any of the two dtypes), k_cache/v_cache:
    [NB, BS, Hk, D] (same strides), q_start / q_len / seq_lens: [N] int32 (request n owns
    rows ``q_start[n] ..< q_start[n] + q_len[n]``, its query i at position ``seq_lens[n] -
    q_len[n] + i``), block_table: [N, max_blocks] int32, the requests' own rows. ``sinks``
    ([Hq], gpt-oss): each head's sink logit in its softmax denominator. ``kv_scales``:
    (k_scale, v_scale) of an fp8 cache (ignored for other dtypes). ``bf16_pv_from``: with a
    bf16 cache and output, the query rows at that position or later multiply P.V on bf16
    pairs (the probabilities rounded to bf16, as the AMX kernel's; ``kernels/attention.py``
    says where); None: every row keeps float32 P."""
    fn = _kernel(_BUILD_FLAGS)
    assert fn is not None and k_cache.stride() == v_cache.stride()
    assert rows_readable(q) and rows_readable(out) and out.shape == q.shape
    _, hq, d = q.shape
    _, bs, hk, _ = k_cache.shape
    starts, lens, ctx, table = request_tables(q_start, q_len, seq_lens, block_table)
    s_block, s_slot, s_head, _ = k_cache.stride()
    if sinks is not None:
        sinks = sinks.to(torch.float32).contiguous()  # [Hq]
        assert sinks.shape == (hq,)
    k_lut, v_lut = kv_tables(k_cache, kv_scales)
    rc = fn(
        q.data_ptr(), ROW_DTYPES[q.dtype], q.stride(0),
        out.data_ptr(), ROW_DTYPES[out.dtype], out.stride(0),
        starts.data_ptr(), lens.data_ptr(), ctx.data_ptr(), table.data_ptr(), table.stride(0),
        starts.shape[0], k_cache.data_ptr(), v_cache.data_ptr(), KV_DTYPES[k_cache.dtype],
        k_lut, v_lut,
        s_block, s_slot, s_head, hq, hk, d, bs,
        scale, sliding_window or 0, softcap or 0.0, torch.get_num_threads(),
        None if sinks is None else sinks.data_ptr(), -1 if bf16_pv_from is None else bf16_pv_from,
    )  # fmt: skip
    return rc == 0
