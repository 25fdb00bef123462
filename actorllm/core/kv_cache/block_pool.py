"""The pool of KV blocks: reference counts, the free queue and the prefix-cache index.

State (all of it):

* ``blocks`` — every block; ``blocks[0]`` is the null block, never handed out (padding
  slots in the worker's block tables point at it).
* ``free_queue`` — blocks with ``ref_cnt == 0``, in eviction order.
* ``cached_by_group`` — per KV cache group (``groups.py``), ``{block_hash: block}`` for
  full blocks whose contents are known; ``cached`` is group 0's. A cached block may be in
  use or free. The same tokens cached by two groups are two blocks (each holds its own
  layers' KV), so every group has its own index. A free cached block stays findable until
  it is evicted, i.e. popped from the free queue's head for reuse; eviction drops its hash
  entry and tells the ``eviction_callbacks`` (an offload tier saves the block there, before
  it is overwritten).

One block per hash: if two requests compute the same prefix at the same time, the second
copy is simply not registered and is recycled when freed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import final

from actorllm.core.kv_cache.block_hash import BlockHash
from actorllm.core.kv_cache.free_queue import FreeBlockQueue, KVCacheBlock

# Called as callback(block_hash, block_id) right before a cached block is reused.
EvictionCallback = Callable[[BlockHash, int], None]


@final
class BlockPool:
    """Allocation, sharing and eviction of KV blocks. Plain synchronous code, O(1) per block."""

    def __init__(self, num_blocks: int, enable_caching: bool = True, num_groups: int = 1) -> None:
        if num_blocks < 2:
            raise ValueError(
                f"num_blocks must be at least 2 (one is the null block), got {num_blocks}."
            )
        self.num_blocks = num_blocks  # including the null block
        self.enable_caching = enable_caching
        self.blocks = [KVCacheBlock(i) for i in range(num_blocks)]
        self.null_block = self.blocks[0]
        self.null_block.ref_cnt = 1  # held forever: never free, never evicted
        self.free_queue = FreeBlockQueue(self.blocks[1:])
        self.cached_by_group: list[dict[BlockHash, KVCacheBlock]] = [{} for _ in range(num_groups)]
        self.cached = self.cached_by_group[0]
        self.eviction_callbacks: list[EvictionCallback] = []
        self.num_evictions = 0  # cumulative

    @property
    def num_free_blocks(self) -> int:
        return self.free_queue.num_free_blocks

    @property
    def num_usable_blocks(self) -> int:
        """Blocks that can ever be handed out (all but the null block)."""
        return self.num_blocks - 1

    @property
    def usage(self) -> float:
        """Fraction of usable blocks held by requests (0..1)."""
        return 1.0 - self.free_queue.num_free_blocks / (self.num_blocks - 1)

    def get_cached_block(self, block_hash: BlockHash, group: int = 0) -> KVCacheBlock | None:
        return self.cached_by_group[group].get(block_hash)

    def get_new_blocks(self, n: int) -> list[KVCacheBlock]:
        """Take ``n`` free blocks (evicting their cached contents), each with ref_cnt 1.

        Raises ``ValueError`` if fewer than ``n`` are free; check ``num_free_blocks`` first.
        """
        if n > self.free_queue.num_free_blocks:
            raise ValueError(f"cannot allocate {n} blocks: {self.num_free_blocks} free.")
        out = []
        for _ in range(n):
            block = self.free_queue.popleft()
            if block.block_hash is not None:
                self._evict(block)
            block.ref_cnt = 1
            out.append(block)
        return out

    def _evict(self, block: KVCacheBlock) -> None:
        h = block.block_hash
        assert h is not None
        cached = self.cached_by_group[block.group]
        if cached.get(h) is block:
            del cached[h]
        block.block_hash = None
        self.num_evictions += 1
        for cb in self.eviction_callbacks:
            cb(h, block.block_id)

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Take one more reference on each block (prefix-cache hits); free ones leave the queue."""
        for block in blocks:
            if block.ref_cnt == 0:
                self.free_queue.remove(block)
            block.ref_cnt += 1

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        """Drop one reference on each block, in the given order.

        Blocks that reach zero join the free queue: cached ones at the tail (kept for reuse,
        evicted in the order given), uncached ones at the head (nothing to keep).
        """
        for block in ordered_blocks:
            block.ref_cnt -= 1
            assert block.ref_cnt >= 0, f"{block} freed more often than taken"
            if block.ref_cnt == 0:
                if block.block_hash is None:
                    self.free_queue.appendleft(block)
                else:
                    self.free_queue.append(block)

    def cache_full_blocks(
        self,
        blocks: list[KVCacheBlock],
        block_hashes: list[BlockHash],
        start: int,
        end: int,
        group: int = 0,
    ) -> None:
        """Register ``blocks[start:end]`` under ``block_hashes[start:end]`` in ``group``'s index.

        A hash that is already registered to another block keeps its first block.
        """
        if not self.enable_caching:
            return
        cached = self.cached_by_group[group]
        for i in range(start, end):
            block = blocks[i]
            if block.block_hash is not None or block is self.null_block:
                continue  # a prefix hit (registered already), or a slot handed back
            h = block_hashes[i]
            if h not in cached:
                cached[h] = block
                block.block_hash = h
                block.group = group

    def forget_hashes(self) -> None:
        """Forget every hash, blocks in use included: their KV was computed by weights that
        are gone (a weight update). The blocks stay with their requests."""
        for cached in self.cached_by_group:
            for block in cached.values():
                block.block_hash = None
            cached.clear()

    def reset_prefix_cache(self) -> bool:
        """Forget every hash; refused (False, nothing changed) while any block is in use."""
        if self.free_queue.num_free_blocks != self.num_blocks - 1:
            return False
        for cached in self.cached_by_group:
            for block in cached.values():
                block.block_hash = None
            cached.clear()
        return True
