"""KV-cache write through a slot mapping, Triton; contract of ``kernels/kv_cache.py``.

Layout per layer: ``k_cache``/``v_cache`` are [NB, BS, Hk, D]; slot ``s`` is block
``s // BS``, offset ``s % BS``. Tiling: one program per token copies its [Hk, D] key and value
tiles (cast to the cache dtype) into the slot; tokens with a negative slot (padding) store
nothing. An fp8 cache (``kernels/kv_quant.py``) takes ``key / k_scale`` and ``value / v_scale``
saturated to the format's finite range: quantized by torch on the device, then copied as
bytes (Triton's interpreter rounds fp32 -> fp8 wrongly where the rounding carries into the
exponent: 127.3 became 64).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from actorllm.kernels import kv_quant
from actorllm.kernels.triton._runtime import check_device, next_pow2


@triton.jit
def _write_kv_kernel(
    key_ptr,  # [T, Hk, D]
    value_ptr,  # [T, Hk, D]
    k_cache_ptr,  # [NB, BS, Hk, D]
    v_cache_ptr,  # [NB, BS, Hk, D]
    slot_ptr,  # [T] int64
    HK,
    D,
    BS,
    stride_k_t,
    stride_k_h,
    stride_v_t,
    stride_v_h,
    stride_kc_b,
    stride_kc_s,
    stride_kc_h,
    stride_vc_b,
    stride_vc_s,
    stride_vc_h,
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + row).to(tl.int64)
    block = slot // BS
    offset = slot % BS
    heads = tl.arange(0, BLOCK_H)[:, None]  # [BH, 1]
    dims = tl.arange(0, BLOCK_D)[None, :]  # [1, BD]
    # Padding tokens (slot < 0) get an empty head range: every lane masked, nothing stored.
    live_heads = tl.where(slot >= 0, HK, 0)
    mask = (heads < live_heads) & (dims < D)
    k = tl.load(key_ptr + row * stride_k_t + heads * stride_k_h + dims, mask=mask)
    v = tl.load(value_ptr + row * stride_v_t + heads * stride_v_h + dims, mask=mask)
    kc = k_cache_ptr + block * stride_kc_b + offset * stride_kc_s + heads * stride_kc_h + dims
    vc = v_cache_ptr + block * stride_vc_b + offset * stride_vc_s + heads * stride_vc_h + dims
    tl.store(kc, k.to(k_cache_ptr.dtype.element_ty), mask=mask)
    tl.store(vc, v.to(v_cache_ptr.dtype.element_ty), mask=mask)


def _unit_last(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def write_kv_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> None:
    """Scatter this step's keys and values into their slots, in place (an fp8 cache: divided
    by ``k_scale`` / ``v_scale`` and saturated, ``kv_quant.quantize``).

    key, value: [T, Hk, D] (strided views are fine); k_cache, v_cache: [NB, BS, Hk, D], last
    dim contiguous; slot_mapping: [T] int64, negative entries (padding) are skipped. Slots
    must be < NB * BS (not checked: a host sync). Raises ``ValueError`` on shape mismatch.
    """
    check_device(key, value, k_cache, v_cache, slot_mapping)
    t, hk, d = key.shape
    _, bs, chk, cd = k_cache.shape
    if value.shape != key.shape or v_cache.shape != k_cache.shape or (chk, cd) != (hk, d):
        raise ValueError(
            f"shape mismatch: key {list(key.shape)}, value {list(value.shape)}, "
            f"k_cache {list(k_cache.shape)}, v_cache {list(v_cache.shape)}"
        )
    if slot_mapping.shape != (t,):
        raise ValueError(f"slot_mapping must be [{t}], got {list(slot_mapping.shape)}")
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("k_cache/v_cache need a contiguous last dim (they are written in place)")
    key, value = _unit_last(key), _unit_last(value)
    if t == 0:
        return
    if kv_quant.is_fp8(k_cache.dtype):  # [T, Hk, D] bytes into the caches' bytes
        key = kv_quant.quantize(key, k_cache.dtype, k_scale).view(torch.uint8)
        value = kv_quant.quantize(value, v_cache.dtype, v_scale).view(torch.uint8)
        k_cache, v_cache = k_cache.view(torch.uint8), v_cache.view(torch.uint8)
    _write_kv_kernel[(t,)](
        key, value, k_cache, v_cache, slot_mapping,
        hk, d, bs,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        BLOCK_H=next_pow2(hk), BLOCK_D=next_pow2(d),
    )  # fmt: skip
