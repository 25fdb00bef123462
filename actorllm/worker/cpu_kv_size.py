"""The CPU KV cache's size: the arithmetic, apart from torch and from reading memory.

Without an explicit size (``kv_cache_memory_bytes``, ``VLLM_CPU_KVCACHE_SPACE``) the cache
gets what this engine's configuration can use, within what the host can spare
(:func:`auto_kv_blocks`):

* at least :data:`DEFAULT_CPU_KV_BYTES` (256 MiB: small models keep a cheap cache, and its
  spare blocks keep prefix-cache hits);
* grown to hold :data:`FULL_LENGTH_REQUESTS` requests of ``max_model_len`` tokens at once
  (``min(max_num_seqs, 4)`` of them): a 0.5-8B model with a 32k-40k context starts, and a
  few long requests run side by side. This never exceeds ``max_num_seqs`` full requests,
  more than the scheduler could ever fill;
* capped at :data:`MEMORY_FRACTION` of the memory available once the weights are loaded
  (``worker/host_memory.py``: ``MemAvailable``, or a cgroup limit's headroom), shared
  between the caches this host builds at once (tensor-parallel ranks, data-parallel
  replicas). When even the cap cannot hold one request of ``max_model_len`` tokens, start-up
  fails with :class:`KVCacheSizeError` naming the settings and the longest context that
  fits.

vLLM's CPU worker instead takes ``gpu_memory_utilization`` (0.92 there) of the NUMA node's
memory less the process's resident set, whatever the configuration can use.

An explicit size is taken as given (:func:`explicit_kv_blocks`), but one too small for a
single ``max_model_len`` request fails here, before the cache is allocated, saying which
``max_model_len`` it holds and how many bytes the configured one needs.

    >>> shape = KVShape(bytes_per_block=2**20, block_size=32, max_model_len=8192)
    >>> auto_kv_blocks(shape, max_num_seqs=256, available=64 * 2**30).num_blocks
    1025
    >>> explicit_kv_blocks(shape, 2**29)
    512
"""

from __future__ import annotations

import dataclasses

from actorllm.core.kv_cache.sizing import blocks_for_one_request, largest_model_len

DEFAULT_CPU_KV_BYTES = 256 * 2**20
FULL_LENGTH_REQUESTS = 4
MEMORY_FRACTION = 0.8
# The settings a user changes when the cache is too small, in both spellings.
_MAX_LEN = "max_model_len / --max-model-len"
_KV_SIZE = "kv_cache_memory_bytes / --kv-cache-memory-bytes, or VLLM_CPU_KVCACHE_SPACE in GiB"


class KVCacheSizeError(ValueError):
    """The KV cache cannot hold one request of ``max_model_len`` tokens (a configuration
    error: the message names the settings to change)."""


@dataclasses.dataclass(frozen=True)
class KVShape:
    """What sizes the cache: one block's bytes (every layer of a group, K and V), its
    tokens, and the longest request with how it fills blocks (``chunk``: the largest
    prefill chunk; ``windows``: each KV cache group's sliding window, None: full)."""

    bytes_per_block: int
    block_size: int
    max_model_len: int
    chunk: int = 2048
    windows: tuple[int | None, ...] = (None,)

    @property
    def blocks_per_request(self) -> int:
        """Blocks one request of ``max_model_len`` tokens holds at most."""
        return blocks_for_one_request(self.max_model_len, self.block_size, self.chunk, self.windows)

    def longest_fitting(self, num_blocks: int) -> int:
        """The largest ``max_model_len`` a cache of ``num_blocks`` (null block included)
        holds."""
        return largest_model_len(num_blocks - 1, self.block_size, self.chunk, self.windows)


@dataclasses.dataclass(frozen=True)
class KVCacheSize:
    """The chosen block count (null block included) and why, for the start-up log."""

    num_blocks: int
    reason: str


def human_size(n: int) -> str:
    """Bytes for people: GiB from 1 GiB up, MiB below (``4.38 GiB``, ``256 MiB``)."""
    return f"{round(n / 2**30, 2):g} GiB" if n >= 2**30 else f"{round(n / 2**20, 1):g} MiB"


def _requests(n: int) -> str:
    return f"{n} request" + ("" if n == 1 else "s")


def explicit_kv_blocks(shape: KVShape, budget: int) -> int:
    """The blocks (null block included) of an explicit ``budget`` in bytes; raises
    :class:`KVCacheSizeError` when they cannot hold one request of ``max_model_len``."""
    blocks = max(2, budget // max(1, shape.bytes_per_block))
    need = shape.blocks_per_request + 1
    if blocks >= need:
        return blocks
    need_bytes = need * shape.bytes_per_block
    raise KVCacheSizeError(
        f"the KV cache of {budget} bytes ({human_size(budget)}; {_KV_SIZE}) holds {blocks - 1} "
        f"blocks of {shape.block_size} tokens, not the {need - 1} that one request of "
        f"max_model_len={shape.max_model_len} tokens needs. Set {_MAX_LEN} to "
        f"{shape.longest_fitting(blocks)} or less, or the KV cache to {need_bytes} bytes "
        f"({human_size(need_bytes)}) or more."
    )


def auto_kv_blocks(
    shape: KVShape,
    *,
    max_num_seqs: int,
    available: int | None,
    share: int = 1,
    source: str = "",
) -> KVCacheSize:
    """The default size (the module's rule): ``available`` is the memory the host can
    still spare in bytes (None: unknown, no cap; ``source`` says where it was read),
    ``share`` how many caches this host builds from it. Raises :class:`KVCacheSizeError`
    when the cap cannot hold one request of ``max_model_len``."""
    bpb, per_request = max(1, shape.bytes_per_block), shape.blocks_per_request
    floor = max(2, DEFAULT_CPU_KV_BYTES // bpb)
    requests = min(max_num_seqs, FULL_LENGTH_REQUESTS)
    target = max(floor, requests * per_request + 1)
    why = (
        f"{_requests(requests)} of max_model_len={shape.max_model_len} tokens"
        if target > floor
        else f"the {human_size(DEFAULT_CPU_KV_BYTES)} floor"
    )
    if available is None:
        return KVCacheSize(target, f"{why}; the memory available is unknown, no cap")
    cap_bytes = int(available * MEMORY_FRACTION) // max(1, share)
    cap = cap_bytes // bpb
    spare = (
        f"{MEMORY_FRACTION:.0%} of the {human_size(available)} available after the weights"
        + (f" ({source})" if source else "")
        + (f", shared by {share} KV caches" if share > 1 else "")
    )
    if cap < per_request + 1:
        fits = shape.longest_fitting(cap) if cap >= 2 else 0
        need = (per_request + 1) * bpb
        raise KVCacheSizeError(
            f"the KV cache cannot hold one request of max_model_len={shape.max_model_len} "
            f"tokens ({human_size(need)}) in the memory this host can spare: {spare} is "
            f"{human_size(cap_bytes)}, enough for max_model_len={fits}. Set {_MAX_LEN} to {fits} "
            f"or less, or size the KV cache yourself ({_KV_SIZE}), or free memory."
        )
    if cap < target:
        return KVCacheSize(cap, f"{spare}, less than {why}")
    return KVCacheSize(target, f"{why}, within {spare}")


def effective_max_model_len(model_limit: int, configured: int | None) -> int:
    """The engine's ``max_model_len``: the configured one capped by what the runner's model
    allows (a runner reporting 0: the configured one, else 2048)."""
    max_len = model_limit or configured or 2048
    return min(max_len, configured) if configured is not None else max_len
