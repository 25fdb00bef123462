"""Tempered inverse-CDF sampling of unfiltered rows through the native CPU kernel
(``csrc/sampling.c``): one pass for the row max, one for the block sums, then one block
recomputed, instead of the torch path's five [B, V] passes (``kernels/sampling.py``'s
``_tempered_weights`` + ``sample_inverse_cdf``). :func:`sample_tempered` returns None where
the kernel does not take the call (not CPU, another dtype, the build failed or
``ACTORLLM_NATIVE_KERNELS=0``); the caller then runs the torch path.
Parity: tests/kernels/test_native_sampling.py."""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import torch

from actorllm.kernels import native

_BF16 = {torch.float32: 0, torch.bfloat16: 1}
# Extra compiler flags of the build the entry calls (tests: ("-mno-avx512f",)).
_BUILD_FLAGS: tuple[str, ...] = ()
_P, _I64, _I32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int


@functools.cache
def _lib(extra_flags: tuple[str, ...] = ()) -> ctypes.CDLL | None:
    lib = native.library("sampling", extra_flags)
    if lib is None:
        return None
    fn = lib.sample_tempered
    # logits, row stride, bf16, rt, u, out, b, v, threads
    fn.argtypes = [_P, _I64, _I32, _P, _P, _P, _I64, _I64, _I32]
    fn.restype = ctypes.c_int
    return lib


def _fn() -> Any:
    lib = _lib(_BUILD_FLAGS)
    return None if lib is None else lib.sample_tempered


def sample_tempered(
    logits: torch.Tensor, temperature: torch.Tensor, uniform: torch.Tensor
) -> torch.Tensor | None:
    """logits: [B, V] float32 or bfloat16 (last dim contiguous); temperature: [B] > 0;
    uniform: [B] in [0, 1) -> [B] int64: token i with probability softmax(logits / t)_i,
    drawn by inverse CDF from ``uniform`` (no filters: the caller checked). Logits are
    only read. None where the kernel does not take the call."""
    fn = _fn()
    if fn is None or logits.dim() != 2 or logits.dtype not in _BF16:
        return None
    if logits.device.type != "cpu" or logits.stride(-1) != 1 or logits.shape[1] == 0:
        return None
    b, v = logits.shape
    rt = temperature.reciprocal().to(torch.float32).contiguous()  # [B], as the torch path
    u = uniform.to(torch.float32).contiguous()  # [B]
    if rt.device.type != "cpu" or u.device.type != "cpu" or rt.shape != (b,) or u.shape != (b,):
        return None
    out = torch.empty(b, dtype=torch.int64)  # [B]
    rc = fn(
        logits.data_ptr(), logits.stride(0), _BF16[logits.dtype], rt.data_ptr(), u.data_ptr(),
        out.data_ptr(), b, v, torch.get_num_threads(),
    )  # fmt: skip
    return out if rc == 0 else None
