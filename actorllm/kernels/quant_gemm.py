"""Weight-only quantized GEMM for few rows through the native kernel ``csrc/wq_gemm.c``:
the packed 4/8-bit weight is dequantized chunk by chunk inside the product, so a decode
step reads the packed bytes (a quarter of bf16's for 4-bit) and nothing else.

Returns None where the kernel does not take the call (no native build, not CPU, shapes it
does not handle); the caller then runs its torch path (``models/quant/linear.py``).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import torch

from actorllm.kernels import native

# Up to this many rows the GEMM is bound by reading the weight: the native kernel wins;
# above it the dequantize-a-tile-then-matmul path reuses each tile over the rows.
MAX_ROWS = 16

_P, _I64, _I32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
_ARGS: list[Any] = [_P, _I64, _I64, _P, _I64, _I32, _P, _P, _I64, _P, _P, _I32]


@functools.cache
def _lib() -> Any:
    lib = native.library("wq_gemm")
    if lib is None:
        return None
    lib.wq_linear.argtypes = _ARGS
    lib.wq_linear.restype = ctypes.c_int
    lib.i8_gemm.argtypes = [_P, _I64, _I64, _P, _I64, _P, _I32]
    lib.i8_gemm.restype = ctypes.c_int
    return lib


def _fn() -> Any:
    lib = _lib()
    return None if lib is None else lib.wq_linear


def i8_gemm(q: torch.Tensor, w: torch.Tensor) -> torch.Tensor | None:
    """q: int8 [M, I], w: int8 [O, I] (both contiguous, CPU) -> int32 [M, O] = q @ w.T,
    or None (no native build, or more than :data:`MAX_ROWS` rows)."""
    lib = _lib()
    if lib is None or q.shape[0] > MAX_ROWS or q.device.type != "cpu":
        return None
    q, w = q.contiguous(), w.contiguous()
    out = torch.empty(q.shape[0], w.shape[0], dtype=torch.int32)  # [M, O]
    lib.i8_gemm(q.data_ptr(), q.shape[0], q.shape[1], w.data_ptr(), w.shape[0],
                out.data_ptr(), torch.get_num_threads())  # fmt: skip
    return out


def wq_linear(
    x: torch.Tensor,
    packed: torch.Tensor,
    bits: int,
    scales: torch.Tensor,
    offsets: torch.Tensor,
    group_size: int,
    bias: torch.Tensor | None,
) -> torch.Tensor | None:
    """x: float32 [M, I] contiguous; packed uint8 [O, I * bits / 8]; scales, offsets
    float32 [O, G] (``w = q * scale + offset``); bias float32 [O] or None -> float32
    [M, O], or None (not taken)."""
    if x.device.type != "cpu" or x.shape[0] > MAX_ROWS or x.dtype != torch.float32:
        return None
    fn = _fn()
    if fn is None:
        return None
    m, i = x.shape
    o = packed.shape[0]
    out = torch.empty(m, o, dtype=torch.float32)  # [M, O]
    rc = fn(
        x.data_ptr(), m, i, packed.data_ptr(), o, bits, scales.data_ptr(), offsets.data_ptr(),
        group_size, 0 if bias is None else bias.data_ptr(), out.data_ptr(),
        torch.get_num_threads(),
    )  # fmt: skip
    return out if rc == 0 else None
