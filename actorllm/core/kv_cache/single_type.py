"""One KV cache group's block tables: full attention, or one sliding window.

Every group's table is position-aligned (slot ``i`` holds positions ``[i*bs, (i+1)*bs)``)
and, for a given request, as long as every other group's: a sliding group puts the null
block in the slots it handed back. ``kv_cache_manager.py`` coordinates the groups; this
file knows only what one attention type needs:

* **full attention** reads every position: a prefix hit is the longest run of cached
  blocks, and nothing is handed back before the request ends;
* **a sliding window** ``w`` reads, for a query at position ``p``, keys ``p - w + 1 ..= p``:
  a block wholly before the next query's window goes back to the pool (registered in the
  prefix cache first), and a prefix hit of ``n`` blocks needs only the blocks the query at
  ``n * bs`` reads; the chained hashes vouch for the rest of the prefix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

from actorllm.core.kv_cache.block_hash import BlockHash
from actorllm.core.kv_cache.block_pool import BlockPool
from actorllm.core.kv_cache.free_queue import KVCacheBlock

if TYPE_CHECKING:
    from actorllm.core.request import Request


@final
class SingleTypeManager:
    """Block tables of one KV cache group. Callers check the pool has room first."""

    def __init__(self, pool: BlockPool, block_size: int, window: int | None, group: int) -> None:
        if window is not None and window < 1:
            raise ValueError(f"sliding_window must be at least 1, got {window}.")
        self.pool = pool
        self.block_size = block_size
        self.window = window
        self.group = group
        self.cached = pool.cached_by_group[group]
        # {req_id: blocks, in position order}
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        # {req_id: how many leading blocks are registered in the prefix cache}
        self.num_cached_blocks: dict[str, int] = {}
        # {req_id: how many leading table slots were handed back (sliding window)}
        self.num_skipped_blocks: dict[str, int] = {}

    def num_held_blocks(self, req_id: str) -> int:
        """Blocks the request holds here (slots handed back to the pool not counted)."""
        blocks = self.req_to_blocks.get(req_id)
        return 0 if blocks is None else len(blocks) - self.num_skipped_blocks[req_id]

    # -- prefix cache ---------------------------------------------------------------------

    def longest_hit(self, hashes: list[BlockHash], limit: int) -> int:
        """The most leading blocks, at most ``limit``, this group can serve from the cache."""
        cached = self.cached
        if self.window is None:
            n = 0
            for h in hashes[:limit]:
                if h not in cached:
                    break
                n += 1
            return n
        run = 0  # cached blocks in a row ending at each index
        runs = []
        for h in hashes[:limit]:
            run = run + 1 if h in cached else 0
            runs.append(run)
        for n in range(limit, 0, -1):
            if runs[n - 1] >= n - self._first_read(n):
                return n
        return 0

    def _first_read(self, n: int) -> int:
        """The first block the query at position ``n * bs`` reads (sliding window)."""
        assert self.window is not None
        return max(n * self.block_size - self.window + 1, 0) // self.block_size

    def hit_blocks(self, hashes: list[BlockHash], n: int) -> list[KVCacheBlock]:
        """The ``n``-block hit :meth:`longest_hit` found: null blocks where a sliding
        window needs nothing, the cached blocks after."""
        first = 0 if self.window is None else self._first_read(n)
        cached = self.cached
        return [self.pool.null_block] * first + [cached[h] for h in hashes[first:n]]

    # -- allocation -----------------------------------------------------------------------

    def skip_out_of_window(self, request: Request) -> None:
        """Hand back the blocks no future query of ``request`` reads (sliding window).

        The next query sits at position ``num_computed_tokens`` and reads keys from
        ``num_computed_tokens - window + 1`` on; every block wholly before that is done.
        Steps already in flight may still read them, but the worker runs steps in order, so
        whoever reuses a block writes it only after those reads.
        """
        assert self.window is not None
        req_id = request.request_id
        blocks = self.req_to_blocks[req_id]
        first_pos = request.num_computed_tokens - self.window + 1
        end = min(max(first_pos, 0) // self.block_size, len(blocks))
        start = self.num_skipped_blocks[req_id]
        if end <= start:
            return
        if self.pool.enable_caching:  # keep them findable by later prompts until evicted
            self.cache_computed_blocks(request)
        done = blocks[start:end]
        blocks[start:end] = [self.pool.null_block] * (end - start)
        self.num_skipped_blocks[req_id] = end
        self.pool.free_blocks(reversed(done))

    def num_new_blocks(self, req_id: str, num_slots: int, hits: list[KVCacheBlock]) -> int:
        """Fresh blocks needed for a table of ``num_slots`` slots after taking ``hits``."""
        blocks = self.req_to_blocks.get(req_id)
        return max(num_slots - (len(blocks) if blocks is not None else 0) - len(hits), 0)

    def take_hits(self, req_id: str, hits: list[KVCacheBlock]) -> None:
        """Start the request's table (if new) and append ``hits``, a prefix-cache hit.

        Hits of *every* group must be taken before any group takes fresh blocks: a free hit
        block still sits in the free queue, where a fresh allocation could evict it.
        """
        pool = self.pool
        blocks = self.req_to_blocks.get(req_id)
        if blocks is None:
            blocks = self.req_to_blocks[req_id] = []
            self.num_cached_blocks[req_id] = 0
            self.num_skipped_blocks[req_id] = 0
        if hits:
            null = pool.null_block
            # A sliding-window hit leads with null slots (behind the window): not taken.
            skipped = next((i for i, b in enumerate(hits) if b is not null), len(hits))
            if not blocks:
                self.num_skipped_blocks[req_id] = skipped
            pool.touch(hits[skipped:])
            blocks.extend(hits)

    def take_new(self, req_id: str, num_new: int) -> list[KVCacheBlock]:
        """Append ``num_new`` fresh blocks (after :meth:`take_hits`); returns them."""
        if num_new <= 0:
            return []
        new_blocks = self.pool.get_new_blocks(num_new)
        self.req_to_blocks[req_id].extend(new_blocks)
        return new_blocks

    def cache_computed_blocks(self, request: Request) -> None:
        """Register the full blocks that steps scheduled *before* the current one compute.

        Not those of the step being scheduled: a request in the same batch must not hit a
        block whose KV the batch itself is still writing (that would presume an attention
        backend that writes every token's KV before any read). Known tokens only: a
        placeholder's token id is not known yet.
        """
        req_id = request.request_id
        blocks = self.req_to_blocks[req_id]
        known = min(request.num_computed_tokens, request.num_tokens)
        num_full = min(known // self.block_size, len(request.block_hashes), len(blocks))
        start = self.num_cached_blocks[req_id]
        if num_full > start:
            self.pool.cache_full_blocks(blocks, request.block_hashes, start, num_full, self.group)
            self.num_cached_blocks[req_id] = num_full

    def free(self, request: Request) -> None:
        """Release the request's blocks, tail first (registered in the prefix cache first,
        so a finished or preempted request leaves its prefix behind). Idempotent."""
        req_id = request.request_id
        blocks = self.req_to_blocks.get(req_id)
        if blocks is None:
            return
        if self.pool.enable_caching:
            self.cache_computed_blocks(request)
        del self.req_to_blocks[req_id]
        del self.num_cached_blocks[req_id]
        skipped = self.num_skipped_blocks.pop(req_id)
        self.pool.free_blocks(reversed(blocks[skipped:]))
