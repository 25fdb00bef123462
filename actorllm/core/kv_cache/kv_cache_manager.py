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

Sliding windows. When an attention layer sees only the last ``sliding_window`` positions
(Mistral, Mixtral, Phi-3 with a window), a block whose positions all lie before the window
of the request's next query is never read again: ``allocate_slots`` hands it back to the
pool (registered in the prefix cache first, so it stays findable until evicted) and leaves
the null block in its table slot, keeping the table position-aligned. A running request
then holds at most ``sliding_window / block_size + 1`` blocks plus its current chunk, and
admission sees the room that frees. Prefix lookups need only the blocks the new request's
first query window reads (chained hashes vouch for the rest of the prefix), so a hit
survives the eviction of its head, which goes back to the pool first; the slots before get
the null block. The worker's block tables keep the old ids for those slots; attention
never reads them (the window masks them out).

Hybrid models (Gemma 2/3: sliding and full layers). Layers are split into KV cache groups
(``groups.py``), one block table per group, all drawing from this one pool
(``group_windows``, one entry per group). Each group is a :class:`SingleTypeManager`; this
class coordinates them: an allocation covers every group or none, freeing frees every
group, and a prefix-cache hit is the longest prefix *every* group can serve (full groups:
a run of cached blocks from the start; sliding groups: the blocks inside the window), so
sliding groups give their out-of-window blocks back while full groups keep theirs.

Allocation is all-or-nothing: ``allocate_slots`` returns ``None`` and changes nothing when
the pool cannot cover the request; the scheduler then preempts someone and retries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, final

from actorllm.core.kv_cache.block_hash import BlockHash, BlockHasher, HashAlgo
from actorllm.core.kv_cache.block_pool import BlockPool, EvictionCallback
from actorllm.core.kv_cache.free_queue import KVCacheBlock
from actorllm.core.kv_cache.single_type import SingleTypeManager
from actorllm.core.kv_cache.sizing import blocks_for_one_request

if TYPE_CHECKING:
    from actorllm.core.request import Request

_NO_BLOCKS: tuple[KVCacheBlock, ...] = ()

# Blocks per KV cache group (one list per group, in group order).
GroupBlocks = tuple[list[KVCacheBlock], ...]


@final
class KVCacheManager:
    """Block tables of running requests; allocation, prefix-cache lookups and freeing.

    >>> from actorllm.core.request import Request
    >>> from actorllm.core.sampling_params import SamplingParams
    >>> kv = KVCacheManager(num_blocks=8, block_size=4)
    >>> r = Request("r", list(range(10)), SamplingParams())
    >>> r.attach_block_hasher(kv.block_hasher)
    >>> [[b.block_id for b in g] for g in kv.allocate_slots(r, 10)]
    [[1, 2, 3]]
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
        group_windows: Sequence[int | None] | None = None,
    ) -> None:
        """``group_windows``: the window of each KV cache group (None: full attention), for
        a hybrid model; None means one group, windowed by ``sliding_window``."""
        if group_windows is not None and sliding_window is not None:
            raise ValueError("pass sliding_window or group_windows, not both.")
        windows = tuple(group_windows) if group_windows is not None else (sliding_window,)
        if not windows:
            raise ValueError("group_windows needs at least one group.")
        self.block_size = block_size
        self.sliding_window = sliding_window
        self.group_windows = windows
        self.enable_caching = enable_caching
        self.block_pool = BlockPool(num_blocks, enable_caching, num_groups=len(windows))
        self.block_hasher = BlockHasher(block_size, hash_algo)
        self.groups = [
            SingleTypeManager(self.block_pool, block_size, w, g) for g, w in enumerate(windows)
        ]
        self._main = self.groups[0]
        self._sliding = [g for g in self.groups if g.window is not None]
        # What a step that needs no new block gets (shared: callers never mutate it).
        # What allocate_slots returns when a running request needs no new block (shared:
        # read-only; ``is`` tells it apart).
        self._nothing_new: GroupBlocks = tuple([] for _ in self.groups)
        # Cumulative prefix-cache statistics, in tokens.
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0

    # -- views ----------------------------------------------------------------------------

    @property
    def num_groups(self) -> int:
        return len(self.groups)

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

    @property
    def req_to_blocks(self) -> dict[str, list[KVCacheBlock]]:
        """``{req_id: blocks}`` of group 0 (every group holds the same requests)."""
        return self._main.req_to_blocks

    def get_blocks(self, req_id: str, group: int = 0) -> Sequence[KVCacheBlock]:
        return self.groups[group].req_to_blocks.get(req_id, _NO_BLOCKS)

    def get_block_ids(self, req_id: str) -> tuple[list[int], ...]:
        """The request's block ids, one list per group."""
        return tuple(
            [b.block_id for b in g.req_to_blocks.get(req_id, _NO_BLOCKS)] for g in self.groups
        )

    def get_cached_block_pairs(self, request: Request) -> list[tuple[BlockHash, int]]:
        """``(block_hash, block_id)`` of the request's full, hashed blocks, in order.

        What a KV connector saves to (or an offload tier keys) for this request. Group 0's
        (connectors serve single-group models only).
        """
        blocks = self._main.req_to_blocks.get(request.request_id, _NO_BLOCKS)
        null = self.block_pool.null_block
        return [
            (h, b.block_id)
            for h, b in zip(request.block_hashes, blocks, strict=False)
            if b is not null  # handed back (sliding window): no longer this request's
        ]

    def num_held_blocks(self, req_id: str, group: int | None = None) -> int:
        """Blocks the request holds in ``group`` (None: all groups), table slots handed
        back to the pool not counted."""
        if group is not None:
            return self.groups[group].num_held_blocks(req_id)
        return sum(g.num_held_blocks(req_id) for g in self.groups)

    # -- prefix cache ---------------------------------------------------------------------

    def get_computed_blocks(self, request: Request) -> tuple[GroupBlocks, int]:
        """The longest prefix every group serves from the cache (blocks per group), and its
        token count.

        Never covers the last known token (its logits are needed). Takes no references:
        pass the blocks to :meth:`allocate_slots` as ``new_computed_blocks``. No hit when
        caching is off or the request skips reading the cache (skip_reading_prefix_cache,
        prompt logprobs).
        """
        if not self.enable_caching or request.skip_prefix_cache:
            return tuple([] for _ in self.groups), 0
        hashes = request.block_hashes
        n = min((request.num_tokens - 1) // self.block_size, len(hashes))
        # Each group's longest hit no longer than the others': full groups shrink to any
        # shorter prefix, a sliding group to the longest one whose window is cached; repeat
        # until every group agrees.
        while True:
            m = n
            for g in self.groups:
                m = g.longest_hit(hashes, m)
            if m == n:
                break
            n = m
        self.prefix_cache_queries += request.num_tokens
        self.prefix_cache_hits += n * self.block_size
        return tuple(g.hit_blocks(hashes, n) for g in self.groups), n * self.block_size

    @property
    def nothing_new(self) -> GroupBlocks:
        """The value :meth:`allocate_slots` returns when no block was added (the hot path)."""
        return self._nothing_new

    # -- allocation -----------------------------------------------------------------------

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: GroupBlocks | None = None,
        num_lookahead_tokens: int = 0,
        keep_free: int = 0,
    ) -> GroupBlocks | None:
        """Make room for ``num_new_tokens`` more positions of ``request``; the new blocks,
        one list per group.

        ``num_new_computed_tokens`` are positions that need no compute: a prefix-cache hit
        (covered by ``new_computed_blocks``, one list per group) plus tokens a KV connector
        will load (given fresh blocks here). Returns ``None`` — with nothing changed, except
        that out-of-window blocks go back to the pool (sliding windows) — when the pool
        lacks blocks. Full blocks computed by earlier steps are registered in the prefix
        cache on the way. ``keep_free``: blocks the pool must still hold afterwards (the
        scheduler's watermark for a starting request), else ``None`` as above.
        """
        req_id = request.request_id
        main = self._main
        blocks = main.req_to_blocks.get(req_id)
        bs = self.block_size
        if blocks is not None:
            for g in self._sliding:
                g.skip_out_of_window(request)
        hits = new_computed_blocks
        if hits is not None and not any(hits):
            hits = None
        if blocks is not None and hits is None and not num_new_computed_tokens:
            # Hot path (a running request): most steps need no new block and cache nothing.
            computed = request.num_computed_tokens
            if computed + num_new_tokens + num_lookahead_tokens <= len(blocks) * bs:
                if self.enable_caching and computed // bs > main.num_cached_blocks[req_id]:
                    for g in self.groups:
                        g.cache_computed_blocks(request)
                return self._nothing_new
        total = (
            request.num_computed_tokens
            + num_new_computed_tokens
            + num_new_tokens
            + num_lookahead_tokens
        )
        num_slots = -(-total // bs)
        group_hits = self._group_hits(hits)
        num_needed = [
            g.num_new_blocks(req_id, num_slots, h)
            for g, h in zip(self.groups, group_hits, strict=True)
        ]
        if not self._fits(num_needed, group_hits, keep_free):
            return None
        for g, h in zip(self.groups, group_hits, strict=True):
            g.take_hits(req_id, h)
        new_blocks = tuple(
            g.take_new(req_id, n) for g, n in zip(self.groups, num_needed, strict=True)
        )
        if self.enable_caching:
            for g in self.groups:
                g.cache_computed_blocks(request)
        return new_blocks

    def holds_whole(
        self,
        request: Request,
        total: int,
        chunk: int,
        hits: GroupBlocks | None,
        keep_free: int = 0,
    ) -> bool:
        """Whether the pool could give ``request`` blocks for ``total`` tokens at once (past
        the prefix-cache ``hits`` it would take; a windowed group only its window behind a
        chunk of ``chunk``: :func:`blocks_for_one_request`) and still keep ``keep_free``:
        vLLM's check before starting a prompt it will prefill in chunks."""
        req_id, bs = request.request_id, self.block_size
        group_hits = self._group_hits(hits)
        needed = [
            g.num_new_blocks(req_id, blocks_for_one_request(total, bs, chunk, (g.window,)), h)
            for g, h in zip(self.groups, group_hits, strict=True)
        ]
        return self._fits(needed, group_hits, keep_free)

    def _group_hits(self, hits: GroupBlocks | None) -> GroupBlocks:
        """``hits`` per group, or no hits in any group (None)."""
        return hits if hits is not None else tuple([] for _ in self.groups)

    def _fits(self, needed: Sequence[int], hits: GroupBlocks, keep_free: int) -> bool:
        """Whether the pool gives each group its ``needed`` fresh blocks and the ``hits``
        (hit blocks that sit in the free queue stop being free when taken) and still holds
        ``keep_free``."""
        hits_free = sum(1 for h in hits for b in h if b.ref_cnt == 0)
        return sum(needed) + hits_free + keep_free <= self.block_pool.free_queue.num_free_blocks

    def free(self, request: Request) -> None:
        """Release the request's blocks in every group, tail first. Idempotent.

        Full blocks its scheduled steps compute are registered in the prefix cache first, so
        a finished or preempted request leaves its prefix behind for others.
        """
        for g in self.groups:
            g.free(request)

    def forget_prefix_cache(self) -> None:
        """Drop every cached prefix, blocks in use included (new weights: stale KV)."""
        self.block_pool.forget_hashes()

    def reset_prefix_cache(self) -> bool:
        """Forget all cached prefixes; refused (False) while any request holds blocks."""
        return self.block_pool.reset_prefix_cache()
