"""W8A8 int8 linears: dynamic per-token activation quantization and the int8 GEMM.

Each input row gets its own symmetric scale (``absmax / 127``) and is rounded to int8
(round-half-even, clamped to ``[-128, 127]``), as vLLM's ``scaled_int8_quant`` does; the
product ``x_q @ w_q.T`` is accumulated exactly in int32 and scaled back by
``scale_row * scale_col``.

Where the CPU has int8 dot products (``cpu_features.native_int8``: VNNI or AMX-INT8, read
from the OS) the GEMM is ``torch._int_mm`` (oneDNN's u8s8/s8s8 kernels) above
:data:`NATIVE_MAX_ROWS` rows; up to it (batch-1 decode) the native call below, whose weight
stream beats oneDNN's fixed cost there. Elsewhere on the
CPU the whole linear is one native call (``quant_gemm.w8a8_linear``: the same rounding,
exact int32 products with the host's SIMD, the same epilogue) at every row count, so a
row's bits do not depend on its batch. Without a native build (and on CUDA, whose
``_int_mm`` wants more than 16 rows) the integers are multiplied in float32 one weight
tile at a time: exact while ``I * 127 * 128 < 2 ** 24`` (I < 1032), beyond that rounded
like any float32 GEMM.
"""

from __future__ import annotations

import torch

from actorllm.kernels.cpu_features import native_int8
from actorllm.kernels.quant_gemm import i8_gemm, w8a8_linear

# Weight rows widened to float32 at a time on the fallback path.
FALLBACK_TILE_ELEMENTS = 1 << 20
# Up to this many rows a W8A8 linear takes the native call even where oneDNN has int8 dot
# products: 2-core Xeon (AMX, VNNI), int8 [6144 x 1024] weight, 1 / 2 / 4 / 6 rows:
# native 0.135 / 0.194 / 0.276 / 0.408 ms, torch._int_mm path 0.373 / 0.372 / 0.381 / 0.384
# ms. Both give the same bits (same row quantization, exact int32 sums, same epilogue),
# so a row's result does not depend on which one its batch took.
NATIVE_MAX_ROWS = 4


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
    few = x.shape[0] <= NATIVE_MAX_ROWS
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
