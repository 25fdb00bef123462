"""W8A8 int8 linears on AMX tiles through the native kernel ``csrc/amx_int8_linear.c``.

Why: a decode step multiplies 1-32 rows by each weight and is bound by reading it once;
``torch._int_mm`` (oneDNN) pays a fixed cost of ~0.37 ms per [M x 1024] x [1024 x 6144]
product at few rows whatever M, and the native VNNI call (``quant_gemm.w8a8_linear``) grows
with the rows. This kernel quantizes the rows (as :func:`int8_gemm.quantize_rows`, bit for
bit), multiplies on the tiles (TDPBSSD, exact int32 sums) and applies the same float32
epilogue, in one call: the same bits as every other W8A8 path, a row's independent of its
batch. On a 2-core Xeon (AMX) it is the fastest W8A8 path at every row count measured, 1 to
2048 (``int8_gemm.NATIVE_MAX_ROWS``'s comment has the numbers), and at 8 rows reads a cold
[6144 x 1024] weight in 0.31 ms against bf16 AMX's 0.46.

The weight is the tiles' A operand, read as the checkpoint stores it ([O, I] int8,
row-major): no packed copy, so resident weight memory stays at the quantized size, the
``weight`` parameter keeps its meaning for every other reader, and an in-place rewrite
of it is simply read at the next call (nothing to invalidate).

Where it applies is detected, never assumed: an x86 CPU reporting ``amx_int8`` (and
AVX512-BW for the quantization and epilogue), a native build that has the AMX path, and
Linux granting the process the tile state. Elsewhere :func:`available` is False and the
caller keeps its other paths. Shapes it takes: any (input width, output width, rows).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from typing import Any

import torch

from actorllm.kernels import native, native_ranges
from actorllm.kernels.cpu_features import amx_int8, cpu_flags

_P, _I64, _I32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
# Input and output dtypes the kernel reads and writes itself (others go through float32).
_NATIVE_DTYPES = (torch.float32, torch.bfloat16)
# What a profiler trace (start_profile, torch.profiler) calls each product.
PROFILER_NAME = "actorllm::amx_int8_linear"


@functools.cache
def _lib() -> Any:
    if not amx_int8() or "avx512bw" not in cpu_flags():
        return None
    return native.tile_library("amx_int8_linear", "amx_int8_init", {
        "amx_int8_linear": ([_P, _I32, _I64, _I64, _P, _I64, _P, _P, _P, _I32, _I64, _I32],
                            ctypes.c_int),
    })  # fmt: skip


def available() -> bool:
    """Whether W8A8 linears can run on this kernel here."""
    return _lib() is not None


def linear(
    x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor | None:
    """x: [M, I] float (CPU), w: int8 [O, I], w_scale: float32 [O, 1], bias [O] or None ->
    [M, O] in x's dtype: ``int8_gemm.int8_linear``'s result bit for bit; None where the
    kernel does not take the call (not available, not CPU)."""
    lib = _lib()
    if lib is None or x.device.type != "cpu" or w.device.type != "cpu":
        return None
    # the parameter itself, read in place (no copy)
    return run_w8a8(lib.amx_int8_linear, PROFILER_NAME, x, w.contiguous(), w_scale, bias)


def run_w8a8(
    fn: Callable[..., int],
    name: str,
    x: torch.Tensor,
    w: torch.Tensor,
    w_scale: torch.Tensor,
    bias: torch.Tensor | None,
) -> torch.Tensor | None:
    """A W8A8 kernel with this one's arguments (``fn``: the AMX tiles, or
    ``csrc/w8a8_vnni.c`` on its own weight layout) on ``x [M, I]`` against ``w`` (``O``
    output rows, contiguous) -> [M, O] in x's dtype; None where ``fn`` did not run.
    ``name``: the profiler's name for the call."""
    dtype = x.dtype
    native_out = dtype in _NATIVE_DTYPES
    xs = (x if native_out else x.float()).contiguous()  # [M, I]
    if w_scale.dtype != torch.float32 or not w_scale.is_contiguous():
        w_scale = w_scale.float().contiguous()  # [O, 1]
    m, i = xs.shape
    o = w.shape[0]
    out = torch.empty(m, o, dtype=xs.dtype)  # [M, O]
    if m == 0:
        return out.to(dtype)
    # The kernel adds a bias of the output's dtype as torch would (`out += bias` after the
    # cast); any other bias is added here, after it.
    fused = bias is not None and native_out and bias.dtype == dtype
    b = bias.contiguous() if fused and bias is not None else None
    bf16 = int(xs.dtype == torch.bfloat16)
    args = (
        xs.data_ptr(), bf16, m, i, w.data_ptr(), o, w_scale.data_ptr(),
        None if b is None else b.data_ptr(), out.data_ptr(), bf16, o, torch.get_num_threads(),
    )  # fmt: skip
    if not native_ranges.call(name, fn, *args):
        return None
    if not native_out:
        out = out.to(dtype)
    if bias is not None and not fused:
        out += bias
    return out
