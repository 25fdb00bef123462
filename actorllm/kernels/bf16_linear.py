"""bfloat16 linears for few rows on a CPU without bf16 dot products, through the native
kernel ``csrc/bf16_linear.c``.

Why: there (AVX2 hosts: AMD Zen 2/3, older Intel) oneDNN emulates bf16 GEMMs, so
``models/onednn_linear.py`` packs a float32 copy of each bf16 weight, and a decode step
that reads it moves twice the bytes of the bf16 weight. Decode is bound by exactly those
bytes. This kernel reads the bf16 weight and widens it in registers: for a few rows it
runs at the memory's speed on half the bytes. It is also batch invariant (each output
summed in one order whatever the row count), so a speculative verify step of k + 1 rows
computes what k + 1 decode steps would.

Returns None where the kernel does not take the call (no native build, no AVX2 + FMA,
more than :data:`MAX_ROWS` rows, an input width not a multiple of 16); the caller keeps its
own path.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import torch

from actorllm.kernels import native

# Up to this many rows the product is bound by reading the weight, and the bf16 read wins;
# above it the float32 copy's oneDNN GEMM, which reuses each weight tile over many rows.
MAX_ROWS = 32

_P, _I64 = ctypes.c_void_p, ctypes.c_int64


@functools.cache
def _fn() -> Any:
    lib = native.library("bf16_linear")
    if lib is None:
        return None
    fn = lib.bf16_linear
    fn.argtypes = [_P, _I64, _I64, _P, _I64, _P, _P, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
    """x: bf16 [M, I], w: bf16 [O, I], bias float32 [O] or None -> bf16 [M, O] (float32
    sums, one rounding), or None (not taken)."""
    if x.device.type != "cpu" or x.dtype != torch.bfloat16 or w.dtype != torch.bfloat16:
        return None
    if x.shape[0] > MAX_ROWS or x.shape[-1] % 16:
        return None
    fn = _fn()
    if fn is None:
        return None
    assert bias is None or bias.dtype == torch.float32
    x, w = x.contiguous(), w.contiguous()
    m, i = x.shape
    o = w.shape[0]
    out = torch.empty(m, o, dtype=torch.bfloat16)  # [M, O]
    rc = fn(x.data_ptr(), m, i, w.data_ptr(), o, 0 if bias is None else bias.data_ptr(),
            out.data_ptr(), torch.get_num_threads())  # fmt: skip
    return out if rc == 0 else None
