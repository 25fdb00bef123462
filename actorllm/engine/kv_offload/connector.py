"""``OffloadConnector``: the scheduler half of the host/disk offload tier.

Theory of operation
-------------------
Every method runs inside the core ``Scheduler`` (never blocks, no torch). It turns the
scheduler's callbacks into decisions of the shared :class:`OffloadIndex`:

* ``get_num_new_matched_tokens`` — after the local prefix-cache hit, count the request's
  consecutive full-block hashes the index holds (never the block holding the last token,
  whose logits are needed). The matched hashes are pinned until the step is built, so room
  made for saves later in the same ``schedule()`` cannot take them.
* ``update_state_after_alloc`` — order a load of each matched hash into the fresh block the
  scheduler gave that position. The scheduler counts those tokens as computed and registers
  the blocks in its prefix cache under their hashes; the load runs before the forward.
* ``on_block_evicted`` — the block pool is about to reuse a cached block: order a save. Its
  KV is still intact on the device; the save op runs before this step's loads into that
  block and before the forward that overwrites it (ops run in decision order).
* ``request_finished`` — with ``write_through=True``, also save the finished request's fully
  computed blocks (see "Save policy").
* ``build_connector_meta`` — hand the step's ordered ops over as :class:`OffloadMetadata`.

Save policy
-----------
Default: save at eviction only. A block is copied off the device once, at the last moment,
and only if the pool really needs its slot; blocks that stay cached cost nothing.
``write_through=True`` additionally saves a request's computed full blocks when it finishes,
so the tier has them even if the device cache is lost (a core restart or a
``reset_prefix_cache``). Those saves are recorded between steps, so they are held back until
the next step is built and put *first* in its ops (the finished request's blocks may be
reused by that step). If the scheduler ran steps without the connector meanwhile (it was
switched off and on: a gap in ``step_id``), the held-back saves are dropped, not trusted.

Empty steps: the engine sends no step (and no metadata) when ``schedule()`` scheduled
nothing, so the ops of an empty step are kept and go out with the next non-empty one —
nothing was computed in between, so they are still right.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, final

import msgspec

from actorllm.core.kv_cache.block_hash import BlockHash
from actorllm.core.scheduler.kv_connector import KVConnectorBase
from actorllm.core.scheduler_output import SchedulerOutput
from actorllm.engine.kv_offload.index import OffloadIndex
from actorllm.worker.offload_ops import OffloadMetadata

if TYPE_CHECKING:
    from actorllm.core.kv_cache.free_queue import KVCacheBlock
    from actorllm.core.request import Request


class OffloadConnectorStats(msgspec.Struct, frozen=True, kw_only=True):
    num_lookups: int  # requests asked about
    num_hit_tokens: int  # tokens matched (before the scheduler's cap)
    num_loads: int  # blocks ordered loaded
    num_evict_saves: int  # blocks stored when evicted
    num_finish_saves: int  # blocks stored by write-through
    write_through: bool


@final
class OffloadConnector(KVConnectorBase):
    """Scheduler-side offload connector over a shared :class:`OffloadIndex`.

    One per scheduler core; the index outlives it. Building one discards ops a previous
    core decided but never handed over (see :meth:`OffloadIndex.discard_unsent`).
    """

    def __init__(
        self, index: OffloadIndex, block_size: int, *, write_through: bool = False
    ) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {block_size}.")
        self.index = index
        self.block_size = block_size
        self.write_through = write_through
        index.unpin_all()
        index.discard_unsent()
        self._finished: list[tuple[BlockHash, int]] = []  # write-through saves held back
        self._last_step_id: int | None = None  # step id of the last build
        self._stats = dict.fromkeys(
            ("lookups", "hit_tokens", "loads", "evict_saves", "finish_saves"), 0
        )

    # -- KVConnectorBase ------------------------------------------------------------------

    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> int:
        index, bs = self.index, self.block_size
        index.unpin_all()  # an earlier lookup whose admission failed
        self._stats["lookups"] += 1
        if request.skip_prefix_cache or num_computed_tokens % bs:
            return 0  # prompt logprobs need every position computed; hits are whole blocks
        start = num_computed_tokens // bs
        end = (request.num_tokens - 1) // bs  # the block of the last token is computed
        hashes = request.block_hashes[start:end]
        n = index.match(hashes)
        index.pin(hashes[:n])
        self._stats["hit_tokens"] += n * bs
        return n * bs

    def update_state_after_alloc(
        self, request: Request, blocks: Sequence[KVCacheBlock], num_external_tokens: int
    ) -> None:
        if num_external_tokens > 0:
            bs = self.block_size
            # The scheduler has set num_computed_tokens = local hit + external tokens.
            first = (request.num_computed_tokens - num_external_tokens) // bs
            last = -(-request.num_computed_tokens // bs)  # a capped tail block loads whole
            for i in range(first, last):
                self.index.load(request.block_hashes[i], blocks[i].block_id)
            self._stats["loads"] += last - first
        # The loads are ordered; a later drop of those hashes in this step runs after them.
        self.index.unpin_all()

    def on_block_evicted(self, block_hash: BlockHash, block_id: int) -> None:
        if self.index.save(block_hash, block_id):
            self._stats["evict_saves"] += 1

    def request_finished(self, request: Request, block_ids: list[int]) -> None:
        if not self.write_through:
            return
        # Only blocks whose every position is computed by a step already scheduled: those
        # steps run before the next step's ops.
        n = min(len(request.block_hashes), request.num_computed_tokens // self.block_size)
        pairs = zip(request.block_hashes[:n], block_ids[:n], strict=False)
        # Block 0 is the null block: a slot a sliding-window request already handed back.
        self._finished.extend((h, b) for h, b in pairs if b != 0)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> OffloadMetadata:
        step_id = scheduler_output.step_id
        gap = self._last_step_id is not None and step_id != self._last_step_id + 1
        self._last_step_id = step_id
        index = self.index
        if gap:
            self._finished.clear()  # blocks may have been overwritten while we were off
        if scheduler_output.is_empty:
            index.unpin_all()
            return OffloadMetadata(step_id=step_id)  # ops wait for the next real step
        ops = index.take_ops()
        if self._finished:
            # Held-back saves run first; pin what this step touches so the room they need
            # is not taken from a block this step loads or saves.
            index.pin(op.block_hash for op in ops if op.kind in ("load", "save"))
            for h, block_id in self._finished:
                if index.save(h, block_id):
                    self._stats["finish_saves"] += 1
            self._finished.clear()
            ops = index.take_ops() + ops
        index.unpin_all()
        return OffloadMetadata.from_ops(step_id, ops)

    def statistics(self) -> OffloadConnectorStats:
        s = self._stats
        return OffloadConnectorStats(
            num_lookups=s["lookups"],
            num_hit_tokens=s["hit_tokens"],
            num_loads=s["loads"],
            num_evict_saves=s["evict_saves"],
            num_finish_saves=s["finish_saves"],
            write_through=self.write_through,
        )
