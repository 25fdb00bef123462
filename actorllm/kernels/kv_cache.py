"""Paged KV cache layout and the cache write, torch reference.

Layout, per layer: ``k_cache`` and ``v_cache`` are ``[num_blocks, block_size, num_kv_heads,
head_dim]``. Token position ``p`` of a request lives in block ``block_table[p // block_size]``
at offset ``p % block_size``; its *slot* is ``block_id * block_size + offset``. Block 0 is the
null block: never allocated to a request, safe to point padding at.

An fp8 cache (``kernels/kv_quant.py``) stores ``key / k_scale`` and ``value / v_scale``,
saturated to the format's range; the scales are ignored for other dtypes.
"""

from __future__ import annotations

import torch

from actorllm.kernels import kv_quant


def write_kv_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> None:
    """Scatter this step's keys and values into their slots, in place.

    key, value: [T, Hk, D]; k_cache, v_cache: [NB, BS, Hk, D]; slot_mapping: [T] int64,
    negative entries (padding) are skipped. An fp8 cache takes the keys divided by
    ``k_scale`` and the values by ``v_scale``, saturated (:func:`kv_quant.quantize`).
    """
    if kv_quant.is_fp8(k_cache.dtype):
        # torch has no CPU index_copy_ for float8: the same bytes, written as uint8
        key = kv_quant.quantize(key, k_cache.dtype, k_scale).view(torch.uint8)
        value = kv_quant.quantize(value, v_cache.dtype, v_scale).view(torch.uint8)
        k_cache, v_cache = k_cache.view(torch.uint8), v_cache.view(torch.uint8)
    nb, bs, hk, d = k_cache.shape
    # Deliberate host sync (reference path): only padded batches carry negative slots.
    if slot_mapping.numel() and int(slot_mapping.min()) < 0:
        valid = slot_mapping >= 0
        slot_mapping, key, value = slot_mapping[valid], key[valid], value[valid]
    if k_cache.is_contiguous() and v_cache.is_contiguous():
        k_cache.view(nb * bs, hk, d).index_copy_(0, slot_mapping, key.to(k_cache.dtype))
        v_cache.view(nb * bs, hk, d).index_copy_(0, slot_mapping, value.to(v_cache.dtype))
        return
    # A permuted view (the CPU's head- or block-major storage): index block and offset.
    blocks, offsets = slot_mapping // bs, slot_mapping % bs
    k_cache[blocks, offsets] = key.to(k_cache.dtype)
    v_cache[blocks, offsets] = value.to(v_cache.dtype)
