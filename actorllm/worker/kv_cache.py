"""Paged KV cache tensors, allocated by the model runner.

Layout, per layer: a pair ``(k_cache, v_cache)``, each
``[num_blocks, block_size, num_kv_heads, head_dim]`` in the model's dtype. Token position
``p`` of a request lives in block ``block_table[p // block_size]`` at offset
``p % block_size`` (slot ``block_id * block_size + offset``). Block 0 is the null block: the
scheduler never hands it out, and padding points at it.

Storage: the torch reference attention (the CPU path) asks for ``head_major`` caches: each
tensor is stored ``[num_kv_heads, num_blocks, block_size, head_dim]`` and handed out as a
``[num_blocks, block_size, num_kv_heads, head_dim]`` view, so every user indexes the same
logical layout while a gather of blocks lands directly in the ``[Hk, N, S, D]`` layout the
CPU's SDPA reads fastest (``kernels/attention.py``). The Triton kernels take the plain
contiguous layout.

Sizing: ``bytes per block = 2 * num_layers * block_size * num_kv_heads * head_dim *
dtype_size`` (the 2 is K and V), so ``num_blocks = budget_bytes // bytes_per_block``.

    >>> from actorllm.models.config import ModelConfig
    >>> cfg = ModelConfig.from_dict({"architectures": ["LlamaForCausalLM"], "vocab_size": 32,
    ...     "hidden_size": 64, "intermediate_size": 16, "num_hidden_layers": 2,
    ...     "num_attention_heads": 4, "num_key_value_heads": 2})
    >>> kv_cache_bytes_per_block(cfg, block_size=16, dtype=torch.float16)
    4096
"""

from __future__ import annotations

import torch

from actorllm.models.config import ModelConfig

KVCaches = list[tuple[torch.Tensor, torch.Tensor]]


def kv_cache_bytes_per_block(cfg: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    """Bytes one block takes across all layers, K and V."""
    dtype_size = torch.empty(0, dtype=dtype).element_size()
    return 2 * cfg.num_layers * block_size * cfg.num_kv_heads * cfg.head_dim * dtype_size


def allocate_kv_caches(
    cfg: ModelConfig,
    num_blocks: int,
    block_size: int,
    dtype: torch.dtype,
    device: torch.device | str,
    *,
    head_major: bool = False,
) -> KVCaches:
    """One zeroed ``(k_cache, v_cache)`` pair per layer, each [NB, BS, Hk, D] (a view of
    head-major storage with ``head_major``); raises ``ValueError`` if ``num_blocks < 2``
    (block 0 is reserved, so one usable block needs two)."""
    if num_blocks < 2:
        raise ValueError(
            f"num_blocks must be at least 2 (block 0 is the null block), got {num_blocks}"
        )
    hk, d = cfg.num_kv_heads, cfg.head_dim

    def one() -> torch.Tensor:
        if head_major:
            store = torch.zeros((hk, num_blocks, block_size, d), dtype=dtype, device=device)
            return store.permute(1, 2, 0, 3)  # [NB, BS, Hk, D] view
        return torch.zeros((num_blocks, block_size, hk, d), dtype=dtype, device=device)

    return [(one(), one()) for _ in range(cfg.num_layers)]
