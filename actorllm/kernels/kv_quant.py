"""An fp8 KV cache, as vLLM stores one (``--kv-cache-dtype fp8 / fp8_e4m3 / fp8_e5m2``).

Each layer has a key scale and a value scale (floats; 1.0 unless the checkpoint carries
``k_scale`` / ``v_scale``, ``models/kv_scales.py``). Writing divides by the scale and
converts with saturation to the format's finite range (torch's plain ``.to(float8)``
turns values past the range into NaN, vLLM's cache kernels clamp); reading widens and
multiplies by the scale. The native CPU kernels widen through a 256-entry table of every
byte's value times the scale (:func:`fp8_table`), so reading costs one lookup per element.

    >>> cache_dtype("fp8", torch.bfloat16)
    torch.float8_e4m3fn
    >>> quantize(torch.tensor([1000.0, -1e6, 0.5]), torch.float8_e4m3fn, 1.0).float()
    tensor([ 448.0000, -448.0000,    0.5000])
"""

from __future__ import annotations

import functools

import torch

# vLLM's --kv-cache-dtype names -> the storage dtype (auto: the model's; fp8 is e4m3 as
# vLLM on CUDA).
_NAMED: dict[str, torch.dtype] = {
    "bfloat16": torch.bfloat16,
    "fp8": torch.float8_e4m3fn,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def cache_dtype(name: str, model_dtype: torch.dtype) -> torch.dtype:
    """The KV cache's dtype for ``kv_cache_dtype`` ``name`` (validated by EngineConfig)."""
    if name == "auto":
        return model_dtype
    if name not in _NAMED:
        raise ValueError(f"kv_cache_dtype: unknown value {name!r}")
    return _NAMED[name]


def is_fp8(dtype: torch.dtype) -> bool:
    return dtype in FP8_DTYPES


def fp8_max(dtype: torch.dtype) -> float:
    """The largest finite value: 448 (e4m3fn), 57344 (e5m2)."""
    return float(torch.finfo(dtype).max)


def quantize(x: torch.Tensor, dtype: torch.dtype, scale: float) -> torch.Tensor:
    """``x / scale`` in ``dtype``, saturated to its finite range (NaN stays NaN). x: any
    shape and float dtype -> the same shape in ``dtype``."""
    m = fp8_max(dtype)
    return (x.float() / scale).clamp_(-m, m).to(dtype)


def dequantize(cache: torch.Tensor, scale: float) -> torch.Tensor:
    """An fp8 tensor's values times ``scale``, float32, same shape."""
    return cache.float() * scale


@functools.cache
def fp8_table(dtype: torch.dtype, scale: float) -> torch.Tensor:
    """[256] float32: the value of each byte of ``dtype`` times ``scale`` (float32
    rounding once, as :func:`dequantize`), the native kernels' widening table."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    return (codes.view(dtype).float() * scale).contiguous()
