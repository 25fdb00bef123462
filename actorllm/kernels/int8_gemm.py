"""W8A8 int8 linears: dynamic per-token activation quantization and the int8 GEMM.

Each input row gets its own symmetric scale (``absmax / 127``) and is rounded to int8
(round-half-even, clamped to ``[-128, 127]``), as vLLM's ``scaled_int8_quant`` does; the
product ``x_q @ w_q.T`` is accumulated exactly in int32 and scaled back by
``scale_row * scale_col``.

Where the CPU has AMX-INT8 (``cpu_features.amx_int8``, read from the OS) the whole linear is
one call of the AMX tile kernel (``kernels/amx_int8_linear.py``) at every row count: it
reads the same [O, I] int8 weight, no copy, and beats both paths below at every row count
measured (:data:`NATIVE_MAX_ROWS`'s comment). Where the CPU has int8 dot products otherwise
(``cpu_features.native_int8``: VNNI, or AMX without a native build) the GEMM is
``torch._int_mm`` (oneDNN's u8s8/s8s8 kernels) above :func:`native_max_rows` rows; up to it
(decode) the native call below, whose weight stream beats oneDNN's fixed cost there. (On
an AVX512-VNNI host without the AMX kernel, ``Int8Linear`` stores a weight the VNNI kernel
takes in that kernel's layout and calls it itself, ``kernels/w8a8_vnni.py``: these paths
then serve only the shapes it does not take.) Elsewhere on the CPU the whole linear is one
native call (``quant_gemm.w8a8_linear``: the same rounding, exact int32 products with the
host's SIMD, the same epilogue) at every row count, so a row's bits do not depend on its
batch. Without a native build (and on CUDA,
whose ``_int_mm`` wants more than 16 rows) the integers are multiplied in float32 one weight
tile at a time: exact while ``I * 127 * 128 < 2 ** 24`` (I < 1032), beyond that rounded like
any float32 GEMM.
"""

from __future__ import annotations

import torch

from actorllm.kernels import amx_int8_linear
from actorllm.kernels.cpu_features import native_int8
from actorllm.kernels.quant_gemm import i8_gemm, i8_gemm_vnni, w8a8_linear

# Weight rows widened to float32 at a time on the fallback path.
FALLBACK_TILE_ELEMENTS = 1 << 20
# Up to this many rows a W8A8 linear takes the native call (its AVX2 loop) even where
# oneDNN has int8 dot products: 2-core Xeon (AMX, VNNI), int8 [6144 x 1024] weight, 1 / 2
# / 4 / 6 rows: native 0.135 / 0.194 / 0.276 / 0.408 ms, torch._int_mm path 0.373 / 0.372
# / 0.381 / 0.384 ms. All paths give the same bits (same row quantization, exact int32
# sums, same epilogue), so a row's result does not depend on which one its batch took.
#
# On an AMX-INT8 host none of them runs: the AMX kernel (amx_int8_linear.py) takes every
# row count, fastest at each. 2-core Xeon (AMX, VNNI; shared with another job, so best of
# several), whole linears from bf16 rows to bf16 out, ms, M = 1 / 2 / 4 / 8 / 16 / 32 / 64
# / 256 / 2048 rows; "cold": each call a different weight of ~1 GB of them (as a decode
# step reads a model; up to 64 rows), "hot": one weight, repeated:
#   [M x 1024] x [1024 x 6144]   cold
#     AMX int8      0.268 0.282 0.285 0.307 0.319 0.355 0.439
#     native AVX2   0.341 0.434 0.580 0.755 1.12  2.07  4.44
#     torch._int_mm 0.616 0.625 0.662 0.657 0.765 1.04  1.25
#     bf16 AMX      0.454 0.449 0.449 0.458 0.488 0.618 0.772
#                                hot
#     AMX int8      0.122 0.139 0.143 0.147 0.155 0.205 0.288 0.793 6.05
#     native AVX2   0.125 0.165 0.262 0.501 0.930 1.85  4.24  18.8
#     torch._int_mm 0.331 0.332 0.347 0.360 0.392 0.524 0.667 2.56  63.6
#     bf16 AMX      0.224 0.224 0.224 0.242 0.245 0.261 0.419 1.44  12.1
#   [M x 3072] x [3072 x 1024]   cold
#     AMX int8      0.128 0.130 0.132 0.140 0.146 0.184 0.232
#     native AVX2   0.167 0.228 0.465 0.475 0.656 1.29  2.45
#     torch._int_mm 0.270 0.293 0.285 0.313 0.336 0.401 0.568
#     bf16 AMX      0.225 0.226 0.226 0.224 0.244 0.297 0.379
#                                hot
#     AMX int8      0.042 0.040 0.043 0.048 0.061 0.091 0.139 0.489 4.47
#     native AVX2   0.057 0.086 0.137 0.265 0.566 1.04  2.31  9.12
#     torch._int_mm 0.128 0.135 0.147 0.167 0.194 0.246 0.359 1.36  23.2
#     bf16 AMX      0.105 0.105 0.107 0.110 0.112 0.117 0.188 0.802 6.20
# `bench quant` (Qwen3 shape, hidden 1024, 8 layers, vocab 32000), W8A8 against bf16, two
# runs of 3 rounds: batch 1 / 8 1.28x / 1.18x (with the native call and _int_mm: 1.12-1.28x
# / 0.67x).
NATIVE_MAX_ROWS = 4
# Where the native product runs on AVX512-VNNI (quant_gemm.i8_gemm_vnni) it beats
# torch._int_mm up to here. 2-core Zen 4 (VNNI, no AMX), the 4 linears of 28 Qwen3-0.6B
# layers (f32 rows in, weights cold), ms, M = 1 / 4 / 8 / 16 / 32: native VNNI 14.5 / 22.0
# / 36.2 / 51.4 / 84.5, the AVX2 loop 14.8 / 22.1 / 45.5 / 91.5 / 133.7, torch._int_mm 27.6
# / 41.8 / 47.4 / 57.9 / 75.2.
VNNI_NATIVE_MAX_ROWS = 16


def native_max_rows() -> int:
    """Rows up to which :func:`int8_linear` takes the native call where ``torch._int_mm``
    also runs (a VNNI host without the AMX kernel)."""
    return VNNI_NATIVE_MAX_ROWS if i8_gemm_vnni() else NATIVE_MAX_ROWS


def int8_gemm_available(device: torch.device) -> bool:
    """Whether ``torch._int_mm`` is the GEMM here: a CPU with VNNI/AMX-INT8. (CUDA's
    ``_int_mm`` wants more than 16 rows, multiples of 8: a decode step has fewer; CUDA
    takes the float32 path.)"""
    return device.type == "cpu" and native_int8() and hasattr(torch, "_int_mm")


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x: [M, I] float -> (int8 [M, I], float32 scales [M, 1]); ``x ~ q * scale``."""
    xf = x.float()
    amax = xf.abs().amax(dim=-1, keepdim=True)  # [M, 1]
    scale = amax / 127.0
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(xf / safe).clamp_(-128, 127).to(torch.int8)  # [M, I]
    return q, scale


def int8_linear(
    x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """x: [M, I] float, w: int8 [O, I], w_scale: float32 [O, 1] -> [M, O] in x's dtype."""
    if x.device.type == "cpu" and amx_int8_linear.available():
        amx = amx_int8_linear.linear(x, w, w_scale, bias)
        if amx is not None:
            return amx
    few = x.shape[0] <= native_max_rows()
    out = None if int8_gemm_available(x.device) and not few else w8a8_linear(x, w, w_scale)
    if out is None:
        q, scale = quantize_rows(x)
        acc = int8_matmul(q, w)  # [M, O] int32 (or exact-integer float32)
        out = acc.float() * scale * w_scale.t()  # [M, O]
    out = out.to(x.dtype)
    if bias is not None:
        out += bias
    return out


def int8_matmul(q: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """q: int8 [M, I], w: int8 [O, I] -> q @ w.T, [M, O] (int32, or float32 holding the
    same integers on the fallback path)."""
    if int8_gemm_available(q.device):
        return torch._int_mm(q, w.t())  # w.t(): a column-major [I, O] view, no copy
    native = i8_gemm(q, w)  # few rows: exact int32 dot products in C (csrc/wq_gemm.c)
    if native is not None:
        return native
    qf = q.float()
    o, i = w.shape
    tile = max(1, min(o, FALLBACK_TILE_ELEMENTS // i))
    out = torch.empty(q.shape[0], o, dtype=torch.float32, device=q.device)
    for start in range(0, o, tile):
        stop = min(o, start + tile)
        out[:, start:stop] = qf @ w[start:stop].float().t()  # [M, t]
    return out
