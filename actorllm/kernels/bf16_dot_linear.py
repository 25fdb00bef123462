"""bfloat16 linears of few rows on AVX512-BF16 dot products (CPUs with them but no AMX:
AMD Zen 4 and 5), through the native kernel ``csrc/bf16_dot_linear.c``.

Why: a decode step multiplies 1-32 rows by each weight, streamed from memory once a step.
oneDNN's prepacked bf16 matmul reaches the cores' dot-product rate at M = 32 on a weight in
cache but not on one it has to wait for; this kernel streams a weight packed in its order
and asks for it ahead. Products are exact and summed in float32, rounded to bfloat16 once
at the output: the arithmetic of a bf16 GEMM. It is also what an AMX host's
``amx_linear.py`` is to its tiles, with the same calls (:func:`takes`, :func:`pack`,
:func:`linear`), so ``models/onednn_linear.py`` keeps one "few rows" copy of a weight for
whichever of the two this host runs.

Where it applies is detected, never assumed: an x86 CPU reporting ``avx512_bf16`` and a
native build for it. Shapes it takes: input width a multiple of 32; any row count and
output width (more than 12 rows make more passes over each block of the weight).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import torch

from actorllm.kernels import native, packed_bf16
from actorllm.kernels.cpu_features import cpu_flags
from actorllm.kernels.packed_bf16 import packable

_P, _I64 = ctypes.c_void_p, ctypes.c_int64
BLOCK_COLS = 32  # weight columns per packed block
K_STEP = 32  # the input width it takes is a multiple of this
PROFILER_NAME = "actorllm::bf16_dot_linear"


@functools.cache
def _lib() -> Any:
    if "avx512_bf16" not in cpu_flags():
        return None
    lib = native.loaded("bf16_dot_linear", {
        "bf16_dot_available": ([], ctypes.c_int),
        "bf16_dot_pack": ([_P, _I64, _I64, _P], None),
        "bf16_dot_linear": ([_P, _I64, _I64, _P, _I64, _P, _P, _I64, ctypes.c_int],
                            ctypes.c_int),
    })  # fmt: skip
    return lib if lib is not None and lib.bf16_dot_available() else None


def available() -> bool:
    """Whether bf16 linears can run on this kernel here."""
    return _lib() is not None


def takes(weight: torch.Tensor) -> bool:
    """Whether ``weight`` ([O, I] bf16, CPU) can be packed for the kernel."""
    return available() and packable(weight, K_STEP)


def pack(weight: torch.Tensor) -> torch.Tensor:
    """weight: bf16 [O, I] (:func:`takes`) -> bf16 [ceil(O / 32) * 32 * I], the kernel's
    layout (``csrc/bf16_dot_linear.c``); the padding columns are zero. torch's CPU
    allocator aligns it to 64 bytes: the kernel's aligned loads of each pair row."""
    lib = _lib()
    assert lib is not None and takes(weight)
    packed = packed_bf16.pack(lib.bf16_dot_pack, weight, BLOCK_COLS)
    assert packed.data_ptr() % 64 == 0
    return packed


def linear(
    x: torch.Tensor, packed: torch.Tensor, out_features: int, bias: torch.Tensor | None
) -> torch.Tensor:
    """x: bf16 [M, I] (CPU); packed from :func:`pack` of a [out_features, I] weight; bias
    bf16 [out_features] or None -> bf16 [M, out_features] = x @ w.T (+ bias)."""
    lib = _lib()
    assert lib is not None
    return packed_bf16.multiply(lib.bf16_dot_linear, PROFILER_NAME, x, packed, out_features, bias)
