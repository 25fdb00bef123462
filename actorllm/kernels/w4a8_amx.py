"""W4A8 on AMX-INT8 tiles through the native kernel ``csrc/w4a8_amx.c``: 4-bit weights
(GPTQ, AWQ, compressed-tensors pack-quantized) times inputs quantized to int8 per row and
block, as ``csrc/w4a8_gemm.c`` quantizes them, multiplied on the tiles.

Why: the vector kernel multiplies every input row by every weight on its own (VNNI
``vpdpbusd``), so from 8 rows on a 4-bit linear cost more than bf16 on AMX tiles (a
decode batch of 8 at 0.8x bf16's tokens/s, 64 at 0.37x). A tile multiplies 16 rows by 16
output columns over 64 inputs in one instruction; the codes are unpacked from 4 bits to
bytes on the way (one AND and one shift per 64 bytes), so resident weight memory stays
the 4-bit size.

The weight is repacked once at load (:func:`tile_layout`: the same bytes, ordered for the
tiles; :func:`untile` inverts it) and its scales and offsets transposed to ``[G, O]``; the
linear then runs this kernel at every row count, so a row's numbers do not depend on its
batch. Its float epilogue sums one exact integer a block (the vector kernel: 8 partial
sums a block), so the two kernels' low bits differ; a process takes one of them for a
weight, decided at load.

Where it applies is detected, never assumed: an x86 CPU reporting ``amx_int8`` and
AVX512-BW, a native build with the AMX path, Linux granting the tile state. Shapes it
takes (:func:`takes`): output rows a multiple of 16, groups a multiple of 64 dividing the
input (GPTQ's and AWQ's 128, whole-row groups of such widths).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import torch

from actorllm.kernels import native, native_ranges
from actorllm.kernels.cpu_features import amx_int8, cpu_flags

_P, _I64, _I32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
PROFILER_NAME = "actorllm::w4a8_amx_linear"
STEP = 64  # inputs a tile step
TILE = 16  # output rows a tile
# Input and output dtypes the kernel reads and writes itself (others go through float32).
_NATIVE_DTYPES = (torch.float32, torch.bfloat16)


@functools.cache
def _lib() -> Any:
    if not amx_int8() or "avx512bw" not in cpu_flags():
        return None
    return native.tile_library("w4a8_amx", "w4a8_amx_init", {
        "w4a8_amx_linear": ([_P, _I32, _I64, _I64, _P, _I64, _P, _P, _I64, _P, _P, _I32, _I32],
                            ctypes.c_int),
    })  # fmt: skip


def available() -> bool:
    """Whether 4-bit W4A8 linears can run on this kernel here."""
    return _lib() is not None


def takes(out_features: int, in_features: int, group_size: int) -> bool:
    """Whether the kernel takes a weight of this shape (see the module doc)."""
    return (
        out_features % TILE == 0
        and group_size % STEP == 0
        and group_size > 0
        and in_features % group_size == 0
    )


def _deinterleave(q: torch.Tensor) -> torch.Tensor:
    """Codes [O, I] -> [O, S, 64]: each step's 32 even columns, then its 32 odd ones (the
    order the kernel's quantized inputs are stored in, csrc/act8.h with units of 64)."""
    o, i = q.shape
    steps = q.view(o, i // STEP, STEP)
    return torch.cat((steps[..., 0::2], steps[..., 1::2]), dim=-1)


def tile_layout(q: torch.Tensor) -> torch.Tensor:
    """Codes uint8 [O, I] (0..15, column order) -> the kernel's packed weight, uint8
    [O, I / 2] (tile t's bytes are rows 16t..16t+15 of it)."""
    o, i = q.shape
    d = _deinterleave(q).view(o // TILE, TILE, i // STEP, TILE, 4)  # [T, n, S, r, j]
    b = d.permute(0, 2, 3, 1, 4).reshape(o // TILE, i // STEP, TILE, 64)  # [T, S, r, 4n+j]
    packed = b[:, :, :8] | (b[:, :, 8:] << 4)  # [T, S, 8, 64]
    return packed.reshape(o, i // 2).contiguous()


def untile(packed: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`tile_layout`: packed uint8 [O', I / 2] (whole tiles) -> codes
    uint8 [O', I] in column order."""
    o, half = packed.shape
    i = 2 * half
    p = packed.reshape(o // TILE, i // STEP, 8, 64)
    b = torch.cat((p & 0xF, p >> 4), dim=2)  # [T, S, r, 4n+j]
    d = b.view(o // TILE, i // STEP, TILE, TILE, 4).permute(0, 3, 1, 2, 4)  # [T, n, S, r, j]
    d = d.reshape(o, i // STEP, STEP)  # [O, S, 64]: evens then odds
    q = torch.empty_like(d)
    q[..., 0::2], q[..., 1::2] = d[..., :32], d[..., 32:]
    return q.view(o, i)


def linear(
    x: torch.Tensor,
    packed: torch.Tensor,
    scales_t: torch.Tensor,
    offsets_t: torch.Tensor,
    group_size: int,
    bias: torch.Tensor | None,
) -> torch.Tensor | None:
    """x [M, I] (CPU; float32 and bfloat16 read as they are, others through float32);
    packed: :func:`tile_layout` [O, I / 2]; scales_t, offsets_t float32 [G, O] contiguous
    (w = q * scale + offset); bias float32 [O] or None -> [M, O] in x's dtype (a bfloat16
    result is the float32 one rounded as ``.to()`` rounds it), or None where the kernel
    does not take the call."""
    lib = _lib()
    if lib is None:
        return None
    return run_tiled(lib.w4a8_amx_linear, PROFILER_NAME, x, packed, scales_t, offsets_t,
                     group_size, bias)  # fmt: skip


def run_tiled(
    fn: Any,
    name: str,
    x: torch.Tensor,
    packed: torch.Tensor,
    scales_t: torch.Tensor,
    offsets_t: torch.Tensor,
    group_size: int,
    bias: torch.Tensor | None,
) -> torch.Tensor | None:
    """One of the kernels that read :func:`tile_layout` (this one, ``w4a8_vnni``; their C
    signature is ``w4a8_amx_linear``'s), named ``name`` in profiles: :func:`linear`'s
    arguments and result."""
    if x.device.type != "cpu":
        return None
    dtype = x.dtype
    xs = (x if dtype in _NATIVE_DTYPES else x.float()).contiguous()  # [M, I]
    m, i = xs.shape
    o = packed.shape[0]
    out = torch.empty(m, o, dtype=xs.dtype)  # [M, O]
    if m == 0:
        return out.to(dtype)
    bf16 = int(xs.dtype == torch.bfloat16)
    args = (
        xs.data_ptr(), bf16, m, i, packed.data_ptr(), o, scales_t.data_ptr(),
        offsets_t.data_ptr(), group_size, None if bias is None else bias.data_ptr(),
        out.data_ptr(), bf16, torch.get_num_threads(),
    )  # fmt: skip
    if not native_ranges.call(name, fn, *args):
        return None
    return out if out.dtype == dtype else out.to(dtype)
