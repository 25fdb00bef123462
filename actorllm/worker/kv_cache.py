"""Paged KV cache tensors, allocated by the model runner.

Layout, per layer: a pair ``(k_cache, v_cache)``, each
``[num_blocks, block_size, num_kv_heads, head_dim]`` in the model's dtype, or the one
``kv_cache_dtype`` names (``kernels/kv_quant.py``'s ``cache_dtype``: bfloat16, or fp8 at
1 byte an element, read by every attention backend). Token position
``p`` of a request lives in block ``block_table[p // block_size]`` at offset
``p % block_size`` (slot ``block_id * block_size + offset``). Block 0 is the null block: the
scheduler never hands it out, and padding points at it.

Storage (``layout``), always handed out as the ``[num_blocks, block_size, num_kv_heads,
head_dim]`` view, so every user indexes the same logical layout:

* ``"contiguous"``: stored as that view (the Triton kernels);
* ``"block_major"``: stored ``[num_blocks, num_kv_heads, block_size, head_dim]``, a block's
  heads side by side: the CPU's native decode kernel (``csrc/paged_decode.c``) walks every
  head of a block at once, so it streams one run of ``Hk * BS * D`` elements a block
  instead of one small run per head (75M preset, 2 cores: bfloat16 attention 19.5 -> 13 ms
  a decode step, float32 26 -> 24.5);
* ``"head_major"``: stored ``[num_kv_heads, num_blocks, block_size, head_dim]``, so a
  gather of blocks lands directly in the ``[Hk, N, S, D]`` layout the CPU's SDPA reads
  fastest (``kernels/attention.py``): the torch path where the native kernels did not build.

CPU caches are advised onto transparent huge pages where the OS offers them
(``worker/huge_pages.py``; fewer TLB misses in the decode walk).

Hybrid models (KV cache groups, ``core/kv_cache/groups.py``): the layers are split into
groups of ``group_size`` layers, one block table per group, and only ``group_size`` tensor
pairs are allocated: the layer at position ``j`` of every group uses pair ``j``. A block id
belongs to one group at a time, so the groups never write each other's slots. With one
group (every layer alike) ``group_size`` is the number of layers: one pair per layer.

Sizing: ``bytes per block = 2 * group_size * block_size * num_kv_heads * head_dim *
dtype_size`` (the 2 is K and V), so ``num_blocks = budget_bytes // bytes_per_block``.

    >>> from actorllm.models.config import CheckpointConfig
    >>> cfg = CheckpointConfig.from_dict({"architectures": ["LlamaForCausalLM"], "vocab_size": 32,
    ...     "hidden_size": 64, "intermediate_size": 16, "num_hidden_layers": 2,
    ...     "num_attention_heads": 4, "num_key_value_heads": 2})
    >>> kv_cache_bytes_per_block(cfg, block_size=16, dtype=torch.float16)
    4096
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import torch
from torch import nn

from actorllm.core.kv_cache.groups import KVCacheGroup, group_layers, group_size, layer_slots
from actorllm.models.attention import PagedAttention
from actorllm.models.config import CheckpointConfig
from actorllm.models.kv_scales import apply_kv_scales
from actorllm.worker.huge_pages import huge_pages_usable, thp_mode, zeros_on_huge_pages

logger = logging.getLogger(__name__)
KVCaches = list[tuple[torch.Tensor, torch.Tensor]]
KVLayout = Literal["contiguous", "block_major", "head_major"]


def kv_cache_groups(cfg: CheckpointConfig, hybrid: bool = True) -> tuple[KVCacheGroup, ...]:
    """The model's KV cache groups; ``hybrid=False`` keeps one group for a model mixing
    attention types (every layer's blocks kept for the request's life, as full attention)."""
    windows = cfg.sliding_windows
    if not hybrid and len(set(windows)) > 1:
        return (KVCacheGroup(None, tuple(range(cfg.num_layers))),)
    return group_layers(windows)


def kv_cache_bytes_per_block(
    cfg: CheckpointConfig,
    block_size: int,
    dtype: torch.dtype,
    groups: Sequence[KVCacheGroup] | None = None,
) -> int:
    """Bytes one block takes across the layers of one group (all layers with one group),
    K and V."""
    dtype_size = torch.empty(0, dtype=dtype).element_size()
    layers = cfg.num_layers if groups is None else group_size(groups)
    return 2 * layers * block_size * cfg.num_kv_heads * cfg.head_dim * dtype_size


def load_kv_scales(model: nn.Module, path: Path, load_format: str) -> None:
    """An fp8 cache's per-layer scales from the checkpoint's weight files (none: 1.0)."""
    from actorllm.models.checkpoint_files import weight_files

    if load_format == "dummy" or not path.is_dir():  # random weights, or a .gguf file
        return
    apply_kv_scales(
        model, weight_files(path, load_format if load_format in ("safetensors", "pt") else "auto")
    )


def bind_kv_groups(model: nn.Module, groups: Sequence[KVCacheGroup], num_layers: int) -> None:
    """Tell each layer's attention which group's block table and slot mapping it reads
    (``AttentionMetadata.for_group``). Attention modules are found in layer order."""
    attns = [m for m in model.modules() if isinstance(m, PagedAttention)]
    if len(attns) != num_layers:
        raise ValueError(f"found {len(attns)} attention modules for {num_layers} layers")
    for attn, (group, _) in zip(attns, layer_slots(groups, num_layers), strict=True):
        attn.kv_group = group


def kv_layout(attention_backend: str) -> KVLayout:
    """How a runner on ``attention_backend`` stores its cache: the torch backend's CPU
    layout, else the plain one (Triton)."""
    return cpu_kv_layout() if attention_backend == "torch" else "contiguous"


def cpu_kv_layout() -> KVLayout:
    """The torch backend's storage: block-major for the native decode kernel, head-major
    for the torch path where the kernel did not build."""
    from actorllm.kernels import paged_decode

    return "block_major" if paged_decode.available() else "head_major"


def allocate_kv_caches(
    cfg: CheckpointConfig,
    num_blocks: int,
    block_size: int,
    dtype: torch.dtype,
    device: torch.device | str,
    *,
    layout: KVLayout = "contiguous",
    groups: Sequence[KVCacheGroup] | None = None,
) -> KVCaches:
    """A zeroed ``(k_cache, v_cache)`` pair per layer, each [NB, BS, Hk, D] (a view of
    storage in ``layout``, see the module doc); with ``groups``, layers at the same
    position of different groups share one pair. Raises ``ValueError`` if
    ``num_blocks < 2`` (block 0 is reserved, so one usable block needs two)."""
    if num_blocks < 2:
        raise ValueError(
            f"num_blocks must be at least 2 (block 0 is the null block), got {num_blocks}"
        )
    hk, d = cfg.num_kv_heads, cfg.head_dim
    on_cpu = torch.device(device).type == "cpu"
    if on_cpu:
        logger.info(
            "KV cache on CPU: %s (transparent huge pages: %s)",
            "huge-page advised" if huge_pages_usable() else "regular pages",
            thp_mode() or "unsupported",
        )

    def zeros(shape: tuple[int, int, int, int]) -> torch.Tensor:
        if on_cpu:  # 2 MiB pages where the OS offers them (worker/huge_pages.py)
            return zeros_on_huge_pages(shape, dtype)
        return torch.zeros(shape, dtype=dtype, device=device)

    def one() -> torch.Tensor:  # [NB, BS, Hk, D]
        if layout == "head_major":
            return zeros((hk, num_blocks, block_size, d)).permute(1, 2, 0, 3)
        if layout == "block_major":
            return zeros((num_blocks, hk, block_size, d)).permute(0, 2, 1, 3)
        return zeros((num_blocks, block_size, hk, d))

    if groups is None:
        return [(one(), one()) for _ in range(cfg.num_layers)]
    pairs = [(one(), one()) for _ in range(group_size(groups))]
    return [pairs[j] for _, j in layer_slots(groups, cfg.num_layers)]
