"""Per-request block tables on top of the :class:`BlockPool`, with prefix caching.

Theory of operation
-------------------
The KV cache is a pool of fixed-size blocks (``block_size`` token positions each). A
request's block table lists, in order, the blocks holding its positions: block ``i`` holds
positions ``[i*bs, (i+1)*bs)``. Blocks are reference counted, so requests sharing a prefix
share its blocks.

Prefix caching. Every *full* block of known tokens has a chained hash (see
``block_hash.py``): equal hashes mean equal token prefixes. Once a step that computes a full
block has been scheduled, the block is registered in the pool under its hash — at the
request's next allocation, or when it is freed. Any later step runs after that one (the
worker executes steps in order), so a hit never reads KV that is not written yet; a request
in the *same* step never hits it. A new request looks up its block hashes in order and reuses the
longest run of hits (``get_computed_blocks``), never the whole prompt: the last prompt token
is always recomputed, because its logits produce the first sample.

Freeing does not erase. A freed block keeps its hash and sits in an LRU free queue; a later
request can still hit it (it leaves the queue again). Only when the pool needs a fresh block
is the least recently freed one evicted and its hash forgotten. A request's blocks are freed
tail first, so the end of a chain is evicted before its beginning (a chain's head is the
part other prompts are most likely to share).

Sliding windows. When every attention layer sees only the last ``sliding_window``
positions (Mistral, Mixtral, Phi-3 with a window), a block whose positions all lie before
the window of the request's next query is never read again: ``allocate_slots`` hands it
back to the pool (registered in the prefix cache first, so it stays findable until
evicted) and leaves the null block in its table slot, keeping the table position-aligned.
A running request then holds at most ``sliding_window / block_size + 1`` blocks plus its
current chunk, and admission sees the room that frees. Prefix lookups need only the blocks
the new request's first query window reads (chained hashes vouch for the rest of the
prefix), so a hit survives the eviction of its head, which goes back to the pool first;
the slots before get the null block. The worker's block tables keep the
old ids for those slots; attention never reads them (the window masks them out). Models
mixing sliding and full layers (Gemma 2/3) pass ``sliding_window=None``: a shared table
cannot drop a block the full layers still read.

Allocation is all-or-nothing: ``allocate_slots`` returns ``None`` and changes nothing when
the pool cannot cover the request; the scheduler then preempts someone and retries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, final

from actorllm.core.kv_cache.block_hash import BlockHash, BlockHasher, HashAlgo
from actorllm.core.kv_cache.block_pool import BlockPool, EvictionCallback
from actorllm.core.kv_cache.free_queue import KVCacheBlock

if TYPE_CHECKING:
    from actorllm.core.request import Request

_NO_BLOCKS: tuple[KVCacheBlock, ...] = ()


@final
class KVCacheManager:
    """Block tables of running requests; allocation, prefix-cache lookups and freeing.

    >>> from actorllm.core.request import Request
    >>> from actorllm.core.sampling_params import SamplingParams
    >>> kv = KVCacheManager(num_blocks=8, block_size=4)
    >>> r = Request("r", list(range(10)), SamplingParams())
    >>> r.attach_block_hasher(kv.block_hasher)
    >>> [b.block_id for b in kv.allocate_slots(r, 10)]
    [1, 2, 3]
    >>> kv.free(r); kv.num_free_blocks
    7
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_caching: bool = True,
        hash_algo: HashAlgo = "xxh3_128",
        sliding_window: int | None = None,
    ) -> None:
        if sliding_window is not None and sliding_window < 1:
            raise ValueError(f"sliding_window must be at least 1, got {sliding_window}.")
        self.block_size = block_size
        self.sliding_window = sliding_window
        self.enable_caching = enable_caching
        self.block_pool = BlockPool(num_blocks, enable_caching)
        self.block_hasher = BlockHasher(block_size, hash_algo)
        # {req_id: blocks, in position order}
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        # {req_id: how many leading blocks are registered in the prefix cache}
        self.num_cached_blocks: dict[str, int] = {}
        # {req_id: how many leading table slots were handed back (sliding window)}
        self.num_skipped_blocks: dict[str, int] = {}
        # Cumulative prefix-cache statistics, in tokens.
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0

    # -- views ----------------------------------------------------------------------------

    @property
    def num_free_blocks(self) -> int:
        return self.block_pool.num_free_blocks

    @property
    def num_usable_blocks(self) -> int:
        return self.block_pool.num_usable_blocks

    @property
    def usage(self) -> float:
        return self.block_pool.usage

    @property
    def eviction_callbacks(self) -> list[EvictionCallback]:
        """Callbacks run as ``cb(block_hash, block_id)`` right before a cached block is reused."""
        return self.block_pool.eviction_callbacks

    def get_blocks(self, req_id: str) -> Sequence[KVCacheBlock]:
        return self.req_to_blocks.get(req_id, _NO_BLOCKS)

    def get_block_ids(self, req_id: str) -> list[int]:
        return [b.block_id for b in self.req_to_blocks.get(req_id, _NO_BLOCKS)]

    def get_cached_block_pairs(self, request: Request) -> list[tuple[BlockHash, int]]:
        """``(block_hash, block_id)`` of the request's full, hashed blocks, in order.

        What a KV connector saves to (or an offload tier keys) for this request.
        """
        blocks = self.req_to_blocks.get(request.request_id, _NO_BLOCKS)
        null = self.block_pool.null_block
        return [
            (h, b.block_id)
            for h, b in zip(request.block_hashes, blocks, strict=False)
            if b is not null  # handed back (sliding window): no longer this request's
        ]

    def num_held_blocks(self, req_id: str) -> int:
        """Blocks the request holds (table slots handed back to the pool not counted)."""
        return len(self.req_to_blocks.get(req_id, _NO_BLOCKS)) - self.num_skipped_blocks.get(
            req_id, 0
        )

    # -- prefix cache ---------------------------------------------------------------------

    def get_computed_blocks(self, request: Request) -> tuple[list[KVCacheBlock], int]:
        """The longest run of cached blocks that prefixes the request, and its token count.

        Never covers the last known token (its logits are needed). Takes no references:
        pass the blocks to :meth:`allocate_slots` as ``new_computed_blocks``. Returns
        ``([], 0)`` when caching is off or the request wants prompt logprobs.
        """
        if not self.enable_caching or request.skip_prefix_cache:
            return [], 0
        max_blocks = (request.num_tokens - 1) // self.block_size
        cached = self.block_pool.cached
        hits: list[KVCacheBlock] = []
        if self.sliding_window is not None:
            hits = self._window_hits(request.block_hashes[:max_blocks])
        else:
            for h in request.block_hashes[:max_blocks]:
                block = cached.get(h)
                if block is None:
                    break
                hits.append(block)
        num_tokens = len(hits) * self.block_size
        self.prefix_cache_queries += request.num_tokens
        self.prefix_cache_hits += num_tokens
        return hits, num_tokens

    def _window_hits(self, hashes: list[BlockHash]) -> list[KVCacheBlock]:
        """The longest hit when only the window matters: ``n`` hit blocks put the next
        query at position ``n * bs``, which reads keys from ``n * bs - window + 1`` on, so
        only the blocks from there to ``n`` must be cached (chained hashes vouch for the
        whole prefix); the slots before get the null block. Searched from the longest."""
        assert self.sliding_window is not None
        bs, window = self.block_size, self.sliding_window
        found = [self.block_pool.cached.get(h) for h in hashes]
        run = 0  # cached blocks in a row ending at each index
        runs = []
        for block in found:
            run = run + 1 if block is not None else 0
            runs.append(run)
        for n in range(len(found), 0, -1):
            first = max(n * bs - window + 1, 0) // bs
            if runs[n - 1] >= n - first:
                hits = [self.block_pool.null_block] * first
                hits += [b for b in found[first:n] if b is not None]
                return hits
        return []

    # -- allocation -----------------------------------------------------------------------

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: Sequence[KVCacheBlock] = _NO_BLOCKS,
        num_lookahead_tokens: int = 0,
    ) -> list[KVCacheBlock] | None:
        """Make room for ``num_new_tokens`` more positions of ``request``; the new blocks.

        ``num_new_computed_tokens`` are positions that need no compute: a prefix-cache hit
        (covered by ``new_computed_blocks``) plus tokens a KV connector will load (given fresh
        blocks here). Returns ``None`` — with nothing changed, except that out-of-window
        blocks go back to the pool (sliding window) — when the pool lacks blocks. Full blocks
        computed by earlier steps are registered in the prefix cache on the way.
        """
        req_id = request.request_id
        blocks = self.req_to_blocks.get(req_id)
        bs = self.block_size
        if blocks is not None and self.sliding_window is not None:
            self._skip_out_of_window(request, blocks)
        if blocks is not None and not new_computed_blocks and not num_new_computed_tokens:
            # Hot path (a running request): most steps need no new block and cache nothing.
            computed = request.num_computed_tokens
            if computed + num_new_tokens + num_lookahead_tokens <= len(blocks) * bs:
                if self.enable_caching and computed // bs > self.num_cached_blocks[req_id]:
                    self._cache_computed_blocks(request, blocks)
                return []
        held = len(blocks) if blocks is not None else 0
        total = (
            request.num_computed_tokens
            + num_new_computed_tokens
            + num_new_tokens
            + num_lookahead_tokens
        )
        num_needed = -(-total // bs) - held - len(new_computed_blocks)
        pool = self.block_pool
        # Hit blocks that sit in the free queue stop being free when we take them.
        num_hits_free = (
            sum(1 for b in new_computed_blocks if b.ref_cnt == 0) if new_computed_blocks else 0
        )
        if max(num_needed, 0) + num_hits_free > pool.free_queue.num_free_blocks:
            return None

        if blocks is None:
            blocks = self.req_to_blocks[req_id] = []
            self.num_cached_blocks[req_id] = 0
            self.num_skipped_blocks[req_id] = 0
        if new_computed_blocks:
            null = pool.null_block
            # A sliding-window hit leads with null slots (behind the window): not taken.
            skipped = next(
                (i for i, b in enumerate(new_computed_blocks) if b is not null),
                len(new_computed_blocks),
            )
            if not blocks:
                self.num_skipped_blocks[req_id] = skipped
            pool.touch(new_computed_blocks[skipped:])
            blocks.extend(new_computed_blocks)
        new_blocks = pool.get_new_blocks(num_needed) if num_needed > 0 else []
        if new_blocks:
            blocks.extend(new_blocks)

        if self.enable_caching:
            self._cache_computed_blocks(request, blocks)
        return new_blocks

    def _skip_out_of_window(self, request: Request, blocks: list[KVCacheBlock]) -> None:
        """Hand back the blocks no future query of ``request`` reads.

        The next query sits at position ``num_computed_tokens`` and reads keys from
        ``num_computed_tokens - sliding_window + 1`` on; every block wholly before that is
        done. Steps already in flight may still read them, but the worker runs steps in
        order, so whoever reuses a block writes it only after those reads.
        """
        assert self.sliding_window is not None
        first_pos = request.num_computed_tokens - self.sliding_window + 1
        end = min(max(first_pos, 0) // self.block_size, len(blocks))
        req_id = request.request_id
        start = self.num_skipped_blocks[req_id]
        if end <= start:
            return
        if self.enable_caching:  # keep them findable by later prompts until evicted
            self._cache_computed_blocks(request, blocks)
        done = blocks[start:end]
        blocks[start:end] = [self.block_pool.null_block] * (end - start)
        self.num_skipped_blocks[req_id] = end
        self.block_pool.free_blocks(reversed(done))

    def _cache_computed_blocks(self, request: Request, blocks: list[KVCacheBlock]) -> None:
        """Register the full blocks that steps scheduled *before* the current one compute.

        Not those of the step being scheduled: a request in the same batch must not hit a
        block whose KV the batch itself is still writing (that would presume an attention
        backend that writes every token's KV before any read). Known tokens only: a
        placeholder's token id is not known yet.
        """
        req_id = request.request_id
        known = min(request.num_computed_tokens, request.num_tokens)
        num_full = min(known // self.block_size, len(request.block_hashes), len(blocks))
        start = self.num_cached_blocks[req_id]
        if num_full > start:
            self.block_pool.cache_full_blocks(blocks, request.block_hashes, start, num_full)
            self.num_cached_blocks[req_id] = num_full

    def free(self, request: Request) -> None:
        """Release the request's blocks, tail first. Idempotent.

        Full blocks its scheduled steps compute are registered in the prefix cache first, so
        a finished or preempted request leaves its prefix behind for others.
        """
        req_id = request.request_id
        blocks = self.req_to_blocks.get(req_id)
        if blocks is None:
            return
        if self.enable_caching:
            self._cache_computed_blocks(request, blocks)
        del self.req_to_blocks[req_id]
        del self.num_cached_blocks[req_id]
        skipped = self.num_skipped_blocks.pop(req_id, 0)
        self.block_pool.free_blocks(reversed(blocks[skipped:]))

    def reset_prefix_cache(self) -> bool:
        """Forget all cached prefixes; refused (False) while any request holds blocks."""
        return self.block_pool.reset_prefix_cache()
