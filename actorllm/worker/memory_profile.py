"""KV cache sizing from ``gpu_memory_utilization``: the measurement and the arithmetic, the
arithmetic kept apart from CUDA so it tests anywhere.

:func:`measure_num_blocks` (``ModelRunner.profile_num_blocks``) reads, after one max-size
dummy forward:

* ``total``: the device's memory (``torch.cuda.mem_get_info``);
* ``torch_peak``: the allocator's peak during the run (weights + activations; the scratch
  cache the run needed is subtracted: the real cache replaces it);
* ``non_torch``: memory used outside torch's allocator (CUDA context, cuBLAS workspaces,
  other processes): ``(total - free) - torch.cuda.memory_reserved()``.

Then ``blocks = (total * utilization - torch_peak - non_torch) // bytes_per_block``: the
cache gets what is left of the budget once the run's peak and everything else is counted.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable

import torch

from actorllm.models.attention import AttentionMetadata, PagedAttention
from actorllm.models.base import CausalLM
from actorllm.worker.kv_cache import allocate_kv_caches, kv_cache_bytes_per_block


class KVCacheMemoryError(RuntimeError):
    """The memory budget leaves no room for the KV cache (a configuration error)."""


_GIB = 2**30


def blocks_from_profile(
    *,
    total: int,
    free: int,
    reserved: int,
    torch_peak: int,
    utilization: float,
    bytes_per_block: int,
) -> int:
    """Number of KV blocks (null block included) that fit the budget; raises
    :class:`KVCacheMemoryError` when fewer than 2 fit and ``ValueError`` for a utilization
    outside (0, 1].

    >>> blocks_from_profile(total=100, free=60, reserved=30, torch_peak=25,
    ...                     utilization=0.9, bytes_per_block=5)
    11
    """
    if not 0 < utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {utilization}")
    non_torch = max(0, (total - free) - reserved)
    budget = int(total * utilization) - torch_peak - non_torch
    blocks = budget // bytes_per_block if budget > 0 else 0
    if blocks < 2:
        raise KVCacheMemoryError(
            f"gpu_memory_utilization={utilization} leaves {budget / _GIB:.2f} GiB for the KV "
            f"cache after weights and activations ({torch_peak / _GIB:.2f} GiB) and "
            f"non-torch memory ({non_torch / _GIB:.2f} GiB) of {total / _GIB:.2f} GiB: "
            "raise gpu_memory_utilization or lower max_num_batched_tokens"
        )
    return blocks


def measure_num_blocks(
    device: torch.device,
    profile_run: Callable[[], int],
    utilization: float,
    bytes_per_block: int,
) -> int:
    """CUDA only: the KV blocks that fit ``utilization`` of ``device``, measured around
    ``profile_run`` (one max-size forward on a scratch cache; returns the scratch cache's
    bytes). Blocks the thread for the run; raises like :func:`blocks_from_profile`."""
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.synchronize(device)  # deliberate, start-up: a clean baseline
    torch.cuda.reset_peak_memory_stats(device)
    scratch = profile_run()
    torch.cuda.synchronize(device)  # deliberate, start-up: the peak is known after
    torch_peak = torch.cuda.max_memory_allocated(device) - scratch
    free, total = torch.cuda.mem_get_info(device)
    return blocks_from_profile(
        total=total,
        free=free,
        reserved=torch.cuda.memory_reserved(device),
        torch_peak=torch_peak,
        utilization=utilization,
        bytes_per_block=bytes_per_block,
    )


def dummy_forward(model: CausalLM, num_tokens: int, num_rows: int, block_size: int) -> int:
    """One forward over ``num_tokens`` dummy tokens (one request) on a scratch cache, then
    logits and their ``log_softmax`` for the last ``num_rows`` rows (the sampler's largest
    temporaries); returns the scratch cache's size in bytes (freed on return)."""
    cfg = model.config
    p = next(model.parameters())
    dtype, device = p.dtype, p.device
    n = max(1, num_tokens)
    blocks = -(-n // block_size)
    caches = allocate_kv_caches(cfg, blocks + 1, block_size, dtype, device)
    pos = torch.arange(n, device=device)
    meta = AttentionMetadata(
        query_start_loc=torch.tensor([0, n], dtype=torch.int32, device=device),
        seq_lens=torch.tensor([n], dtype=torch.int32, device=device),
        block_table=torch.arange(1, blocks + 1, dtype=torch.int32, device=device)[None],
        slot_mapping=pos + block_size,
        query_start_loc_cpu=[0, n],
        seq_lens_cpu=[n],
        max_query_len=n,
        max_seq_len=n,
    )
    # Hybrid models: every group reads the same table here (each layer has its own cache).
    num_groups = 1 + max(
        (m.kv_group for m in model.modules() if isinstance(m, PagedAttention)), default=0
    )
    if num_groups > 1:
        meta = dataclasses.replace(
            meta,
            other_groups=tuple(
                dataclasses.replace(meta, plan_cache={}) for _ in range(num_groups - 1)
            ),
        )
    with torch.inference_mode():
        hidden = model(pos % cfg.vocab_size, pos, meta, caches)  # [n, H]
        logits = model.compute_logits(hidden[-min(n, num_rows) :])  # [N, V]
        logits.log_softmax(dim=-1)
    return (blocks + 1) * kv_cache_bytes_per_block(cfg, block_size, dtype)
