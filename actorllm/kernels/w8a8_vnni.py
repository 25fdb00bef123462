"""W8A8 int8 linears on AVX512-VNNI vectors through the native kernel ``csrc/w8a8_vnni.c``,
for hosts with VNNI but no AMX-INT8 tiles (AMD Zen 4, Intel Ice Lake): the AMX kernel's
arguments and numbers (``amx_int8_linear.py``), bit for bit, on a weight stored in a layout
of its own (:func:`tile_layout`).

Why: the row-major weight puts 4 inputs of one output row in each 32-bit lane of a
``vpdpbusd``, so every input row costs its own pass over the weight and every output a
horizontal sum; a decode batch of 8 ran W8A8 at 0.85x bf16's tokens/s on a Zen 4 host. With
16 output rows x 4 inputs in each 64-byte row, one load serves every input row of a pass and
the outputs stay in lanes.

The weight is repacked once at load (``Int8Linear.finish_loading``): the same number of bytes
(resident memory stays the int8 size), each the int8 value plus 128 (the instruction's
unsigned operand; the kernel takes the excess off exactly). :func:`untile` gives the
checkpoint's ``[O, I]`` int8 back.

Where it applies is detected, never assumed: an x86 CPU reporting ``avx512_vnni`` and
AVX512-BW, and a native build with the VNNI path. Shapes (:func:`takes`): output rows a
multiple of 16, inputs a multiple of 64.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import torch

from actorllm.kernels import native
from actorllm.kernels.amx_int8_linear import run_w8a8
from actorllm.kernels.cpu_features import cpu_flags

_P, _I64, _I32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
PROFILER_NAME = "actorllm::w8a8_vnni_linear"
TILE = 16  # output rows a tile
STEP = 4  # inputs a 64-byte row of a tile
# Extra compiler flags (tests build the path the host would not take).
_BUILD_FLAGS: tuple[str, ...] = ()


@functools.cache
def _lib(flags: tuple[str, ...] = ()) -> Any:
    if not {"avx512_vnni", "avx512bw"} <= cpu_flags():
        return None
    lib = native.loaded("w8a8_vnni", {
        "w8a8_vnni_built": ([], ctypes.c_int),
        "w8a8_vnni_linear": ([_P, _I32, _I64, _I64, _P, _I64, _P, _P, _P, _I32, _I64, _I32],
                             ctypes.c_int),
    }, flags)  # fmt: skip
    return lib if lib is not None and lib.w8a8_vnni_built() else None


def available() -> bool:
    """Whether W8A8 linears can run on this kernel here."""
    return _lib(_BUILD_FLAGS) is not None


def takes(out_features: int, in_features: int) -> bool:
    """Whether the kernel takes a weight of this shape (see the module doc)."""
    return out_features % TILE == 0 and in_features % 64 == 0 and in_features > 0


def tile_layout(w: torch.Tensor) -> torch.Tensor:
    """int8 ``[O, I]`` -> the kernel's weight, uint8 ``[O, I]`` (tile t's bytes are rows
    16t..16t+15 of it)."""
    o, i = w.shape
    u = w.contiguous().view(torch.uint8) ^ 0x80  # w + 128 as unsigned
    return u.view(o // TILE, TILE, i // STEP, STEP).transpose(1, 2).contiguous().view(o, i)


def untile(packed: torch.Tensor) -> torch.Tensor:
    """:func:`tile_layout`'s inverse: the int8 ``[O, I]`` weight."""
    o, i = packed.shape
    u = packed.view(o // TILE, i // STEP, TILE, STEP).transpose(1, 2).reshape(o, i)
    return (u ^ 0x80).view(torch.int8)


def linear(
    x: torch.Tensor, packed: torch.Tensor, w_scale: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor | None:
    """x: [M, I] float (CPU), packed: :func:`tile_layout` of the int8 [O, I] weight,
    w_scale: float32 [O, 1], bias [O] or None -> [M, O] in x's dtype, the AMX kernel's (and
    ``int8_gemm.int8_linear``'s) bits; None where the kernel did not run."""
    lib = _lib(_BUILD_FLAGS)
    if lib is None or x.device.type != "cpu":
        return None
    return run_w8a8(lib.w8a8_vnni_linear, PROFILER_NAME, x, packed, w_scale, bias)
