"""W4A8 on AVX512-VNNI vectors through the native kernel ``csrc/w4a8_vnni.c``, for hosts
with VNNI but no AMX-INT8 tiles (AMD Zen 4, Intel Ice Lake): the AMX kernel's weight layout
(:func:`w4a8_amx.tile_layout`), arguments and numbers, bit for bit.

Why: the row-major vector kernel (``csrc/w4a8_gemm.c``) unpacks, scales and sums a weight
row once per input row, so a decode batch of 8 ran 4-bit linears slower than bf16 on a
Zen 4 host (0.86x its tokens/s). In the tile layout a 64-byte row holds 16 output rows x 4
inputs, what ``vpdpbusd`` multiplies against 4 broadcast input bytes: one unpacked row
serves every input row, and the outputs stay in lanes to the end.

Where it applies is detected, never assumed: an x86 CPU reporting ``avx512_vnni`` and
AVX512-BW, and a native build with the VNNI path. Shapes: :func:`w4a8_amx.takes`.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import torch

from actorllm.kernels import native
from actorllm.kernels.cpu_features import cpu_flags
from actorllm.kernels.w4a8_amx import run_tiled

_P, _I64, _I32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
PROFILER_NAME = "actorllm::w4a8_vnni_linear"
# Extra compiler flags (tests build the path the host would not take).
_BUILD_FLAGS: tuple[str, ...] = ()


@functools.cache
def _lib(flags: tuple[str, ...] = ()) -> Any:
    if not {"avx512_vnni", "avx512bw"} <= cpu_flags():
        return None
    lib = native.loaded("w4a8_vnni", {
        "w4a8_vnni_built": ([], ctypes.c_int),
        "w4a8_vnni_linear": ([_P, _I32, _I64, _I64, _P, _I64, _P, _P, _I64, _P, _P, _I32, _I32],
                             ctypes.c_int),
    }, flags)  # fmt: skip
    return lib if lib is not None and lib.w4a8_vnni_built() else None


def available() -> bool:
    """Whether 4-bit W4A8 linears can run on this kernel here."""
    return _lib(_BUILD_FLAGS) is not None


def linear(
    x: torch.Tensor,
    packed: torch.Tensor,
    scales_t: torch.Tensor,
    offsets_t: torch.Tensor,
    group_size: int,
    bias: torch.Tensor | None,
) -> torch.Tensor | None:
    """:func:`w4a8_amx.linear`'s arguments and result, on vectors."""
    lib = _lib(_BUILD_FLAGS)
    if lib is None:
        return None
    return run_tiled(lib.w4a8_vnni_linear, PROFILER_NAME, x, packed, scales_t, offsets_t,
                     group_size, bias)  # fmt: skip
