"""bfloat16 linears on AMX tiles through the native kernel ``csrc/amx_linear.c``.

Why: a decode step multiplies 1-32 rows by each weight and is bound by reading it once.
torch's oneDNN linear (prepacked, ``models/onednn_linear.py``) reads bf16 weights at 7-9 of
the 17 GB/s a 2-core Intel Xeon (AMX) VM streams at M = 32; this kernel streams a weight
packed in the tiles' order at 13-15 GB/s (gate_up of Llama-3.2-1B, [16384 x 2048]: 7.2 ->
4.6 ms; its LM head 57 -> 40 ms), and from M = 128 up runs at oneDNN's 550-650 GFLOP/s.
Products are exact and summed in float32, rounded to bfloat16 once at the output: the
arithmetic of a bf16 GEMM.

Where it applies is detected, never assumed: an x86 CPU reporting ``amx_bf16`` (and
AVX512-BF16 for the output rounding), a native build that has the AMX path, and Linux
granting the process the tile state. Elsewhere :func:`available` is False and callers keep
oneDNN. Shapes it takes: input width a multiple of 32 (every layer of the supported model
families); any row count and output width.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import torch

from actorllm.kernels import native, packed_bf16
from actorllm.kernels.cpu_features import amx_bf16, cpu_flags
from actorllm.kernels.packed_bf16 import packable

_P, _I64 = ctypes.c_void_p, ctypes.c_int64
# Weight columns per packed block: two 16-column tiles.
BLOCK_COLS = 32
# The input width moves through the tiles 32 values at a time.
K_STEP = 32
# What a profiler trace (start_profile, torch.profiler) calls each product.
PROFILER_NAME = "actorllm::amx_linear"


@functools.cache
def _lib() -> Any:
    if not amx_bf16() or "avx512_bf16" not in cpu_flags():
        return None
    return native.tile_library("amx_linear", "amx_init", {
        "amx_pack": ([_P, _I64, _I64, _P], None),
        "amx_linear": ([_P, _I64, _I64, _P, _I64, _P, _P, _I64, ctypes.c_int], ctypes.c_int),
    })  # fmt: skip


def available() -> bool:
    """Whether bf16 linears can run on this kernel here."""
    return _lib() is not None


def takes(weight: torch.Tensor) -> bool:
    """Whether ``weight`` ([O, I] bf16, CPU) can be packed for the kernel."""
    return available() and packable(weight, K_STEP)


def pack(weight: torch.Tensor) -> torch.Tensor:
    """weight: bf16 [O, I] (:func:`takes`) -> bf16 [ceil(O / 32) * 32 * I], the kernel's
    layout (``csrc/amx_linear.c``); the padding columns are zero."""
    lib = _lib()
    assert lib is not None and takes(weight)
    return packed_bf16.pack(lib.amx_pack, weight, BLOCK_COLS)


def linear(
    x: torch.Tensor, packed: torch.Tensor, out_features: int, bias: torch.Tensor | None
) -> torch.Tensor:
    """x: bf16 [M, I] (CPU); packed from :func:`pack` of a [out_features, I] weight; bias
    bf16 [out_features] or None -> bf16 [M, out_features] = x @ w.T (+ bias)."""
    lib = _lib()
    assert lib is not None
    return packed_bf16.multiply(lib.amx_linear, PROFILER_NAME, x, packed, out_features, bias)
