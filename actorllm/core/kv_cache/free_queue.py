"""KV blocks and the O(1) doubly linked LRU queue of free blocks.

The queue threads through the blocks themselves (``prev_free`` / ``next_free``), between two
sentinels, so removing a block from the middle — a prefix-cache hit on a free block — costs
O(1), where a ``deque`` would scan.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import final

from actorllm.core.kv_cache.block_hash import BlockHash


@final
class KVCacheBlock:
    """One physical block of the paged KV cache (metadata only; tensors live in the worker)."""

    __slots__ = ("block_hash", "block_id", "group", "next_free", "prev_free", "ref_cnt")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        # Requests holding this block; 0 means it is in the free queue.
        self.ref_cnt = 0
        # Set while the block is registered in the prefix cache (full and hashed).
        self.block_hash: BlockHash | None = None
        # The KV cache group whose prefix cache holds it (meaningful while block_hash is set).
        self.group = 0
        self.prev_free: KVCacheBlock | None = None
        self.next_free: KVCacheBlock | None = None

    def __repr__(self) -> str:
        h = self.block_hash.hex()[:8] if self.block_hash else None
        return f"KVCacheBlock({self.block_id}, ref={self.ref_cnt}, hash={h})"


@final
class FreeBlockQueue:
    """Free blocks, least recently freed first. Every operation is O(1) per block.

    Eviction pops from the head; freed blocks are appended at the tail (or pushed at the
    head when they hold nothing worth keeping).
    """

    __slots__ = ("_head", "_tail", "num_free_blocks")

    def __init__(self, blocks: Iterable[KVCacheBlock]) -> None:
        self._head = KVCacheBlock(-1)  # sentinel: _head.next_free is the first free block
        self._tail = KVCacheBlock(-1)  # sentinel: _tail.prev_free is the last free block
        self._head.next_free = self._tail
        self._tail.prev_free = self._head
        self.num_free_blocks = 0
        for b in blocks:
            self.append(b)

    def __len__(self) -> int:
        return self.num_free_blocks

    def popleft(self) -> KVCacheBlock:
        """Remove and return the first free block; raises ``IndexError`` when empty."""
        block = self._head.next_free
        assert block is not None
        if block is self._tail:
            raise IndexError("no free blocks")
        self.remove(block)
        return block

    def remove(self, block: KVCacheBlock) -> None:
        """Unlink ``block`` (which must be in the queue)."""
        prev, nxt = block.prev_free, block.next_free
        assert prev is not None and nxt is not None, f"{block} is not in the free queue"
        prev.next_free = nxt
        nxt.prev_free = prev
        block.prev_free = block.next_free = None
        self.num_free_blocks -= 1

    def append(self, block: KVCacheBlock) -> None:
        """Put ``block`` at the tail: evicted last."""
        last = self._tail.prev_free
        assert last is not None
        self._link(block, last, self._tail)

    def appendleft(self, block: KVCacheBlock) -> None:
        """Put ``block`` at the head: reused first."""
        first = self._head.next_free
        assert first is not None
        self._link(block, self._head, first)

    def _link(self, block: KVCacheBlock, prev: KVCacheBlock, nxt: KVCacheBlock) -> None:
        assert block.prev_free is None and block.next_free is None, f"{block} already queued"
        block.prev_free = prev
        block.next_free = nxt
        prev.next_free = block
        nxt.prev_free = block
        self.num_free_blocks += 1

    def __iter__(self) -> Iterator[KVCacheBlock]:
        """Free blocks from head (next evicted) to tail."""
        block = self._head.next_free
        while block is not None and block is not self._tail:
            yield block
            block = block.next_free
