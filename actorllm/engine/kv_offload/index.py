"""``OffloadIndex``: the scheduler-side authority over what the offload tier holds.

Theory of operation
-------------------
The index is pure bookkeeping (no torch): ``{block_hash: tier}`` with one LRU order per
tier and a capacity in blocks per tier. Every decision it makes — store this block, spill
that one to disk, drop another — is *also* appended to an ordered list of
:class:`~actorllm.worker.offload_ops.OffloadOp` that the worker-side store executes
before the next forward. The index therefore describes the store's contents as they will be
once the ops handed out so far have run (the worker runs steps, and their ops, in order).

Tiers: a new block enters host memory. When host memory is full, its least recently used
block spills to disk (when a disk tier is configured and has room, making room there by
dropping the disk's LRU block) or is dropped. With ``host_blocks == 0`` and a disk tier,
blocks pass through host memory straight to disk (``save`` then ``spill``).

Pins protect hashes the scheduler is about to load: between ``get_num_new_matched_tokens``
and ``update_state_after_alloc`` the block pool may evict (and so save) other blocks, and
the room made for those must never be taken from a block already promised to a request.
A pinned block may spill to disk (the load reads the file) but is never dropped; if only
pinned blocks are left to drop, the new block is simply not stored.

Lost blocks: the worker reports a hash it could not find or write (``report_lost``, safe to
call from any thread); the index forgets it at the next lookup.

The index outlives scheduler rebuilds (the engine keeps one per engine). Not thread-safe
apart from ``report_lost``: every other method runs on the scheduler.

    >>> idx = OffloadIndex(host_blocks=1)
    >>> idx.save(b"a", 3), idx.save(b"b", 4)
    (True, True)
    >>> [(o.kind, o.block_hash) for o in idx.take_ops()]
    [('save', b'a'), ('drop', b'a'), ('save', b'b')]
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from typing import final

import msgspec

from actorllm.core.kv_cache.block_hash import BlockHash
from actorllm.worker.offload_ops import OffloadOp, OpKind, Tier


class OffloadIndexStats(msgspec.Struct, frozen=True, kw_only=True):
    host_used: int
    host_blocks: int
    disk_used: int
    disk_blocks: int
    num_saves: int  # blocks stored (cumulative)
    num_spills: int  # host -> disk moves
    num_drops: int  # blocks dropped for room (or reported lost)
    num_loads_host: int  # loads ordered from each tier
    num_loads_disk: int
    num_lost: int  # reported missing by the worker
    num_declined: int  # saves refused: no room that was not pinned
    pending_ops: int


@final
class OffloadIndex:
    """Which block hashes the offload tier holds, where, in what LRU order; emits store ops."""

    def __init__(self, host_blocks: int, disk_blocks: int = 0) -> None:
        if host_blocks < 0 or disk_blocks < 0:
            raise ValueError(
                f"capacities must be non-negative, got host={host_blocks} disk={disk_blocks}."
            )
        self.host_blocks = host_blocks
        self.disk_blocks = disk_blocks
        # {tier: {block_hash: None}}, least recently used first
        self._lru: dict[Tier, OrderedDict[BlockHash, None]] = {
            Tier.HOST: OrderedDict(),
            Tier.DISK: OrderedDict(),
        }
        self._where: dict[BlockHash, Tier] = {}  # {block_hash: tier}
        self._pending: list[OffloadOp] = []  # decided, not yet handed to the worker
        self._pinned: set[BlockHash] = set()  # never victims (promised to a load)
        self._lost: deque[BlockHash] = deque()  # appended by the worker thread
        self._counts = dict.fromkeys(
            ("saves", "spills", "drops", "loads_host", "loads_disk", "lost", "declined"), 0
        )

    # -- views ----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, block_hash: object) -> bool:
        return block_hash in self._where

    def tier(self, block_hash: BlockHash) -> Tier | None:
        return self._where.get(block_hash)

    def hashes(self, tier: Tier) -> list[BlockHash]:
        """The tier's hashes, least recently used first."""
        return list(self._lru[tier])

    def capacity(self, tier: Tier) -> int:
        return self.host_blocks if tier is Tier.HOST else self.disk_blocks

    # -- lookups and loads ----------------------------------------------------------------

    def match(self, hashes: Sequence[BlockHash]) -> int:
        """How many leading ``hashes`` are held; those become most recently used."""
        self._forget_lost()
        n = 0
        for h in hashes:
            tier = self._where.get(h)
            if tier is None:
                break
            self._lru[tier].move_to_end(h)
            n += 1
        return n

    def pin(self, hashes: Iterable[BlockHash]) -> None:
        self._pinned.update(hashes)

    def unpin_all(self) -> None:
        self._pinned.clear()

    def load(self, block_hash: BlockHash, block_id: int) -> None:
        """Order a load of ``block_hash`` into device block ``block_id``; raises ``KeyError``
        if the index does not hold it (match and pin first)."""
        tier = self._where[block_hash]
        self._lru[tier].move_to_end(block_hash)
        self._counts["loads_host" if tier is Tier.HOST else "loads_disk"] += 1
        self._emit("load", block_hash, block_id)

    # -- saves and room -------------------------------------------------------------------

    def save(self, block_hash: BlockHash, block_id: int) -> bool:
        """Store device block ``block_id`` under ``block_hash``; False if already held (it
        becomes most recently used) or if there is no unpinned room."""
        tier = self._where.get(block_hash)
        if tier is not None:
            self._lru[tier].move_to_end(block_hash)
            return False
        target = Tier.HOST if self.host_blocks > 0 else Tier.DISK
        if self.capacity(target) == 0 or not self._make_room(target):
            self._counts["declined"] += 1
            return False
        self._emit("save", block_hash, block_id)  # the copy always lands in host memory first
        if target is Tier.DISK:
            self._emit("spill", block_hash)
        self._place(block_hash, target)
        self._counts["saves"] += 1
        return True

    def clear(self) -> None:
        """Drop everything (a drop op per block)."""
        for h in list(self._where):
            self._forget(h)

    def report_lost(self, block_hash: BlockHash) -> None:
        """The worker could not find or write ``block_hash``. Thread-safe (deque append)."""
        self._lost.append(block_hash)

    def take_ops(self) -> list[OffloadOp]:
        """Hand over the ops decided since the last call, in order."""
        ops, self._pending = self._pending, []
        return ops

    def discard_unsent(self) -> None:
        """A new scheduler core starts: ops decided by the dead one and never handed over
        are not trusted. Their saves are forgotten (the copy never happened), their loads
        are moot (the new core's block pool is empty); spills and drops are kept (they
        touch no device block, so they are right whenever they run)."""
        ops, self._pending = self._pending, []
        for op in ops:
            if op.kind in ("spill", "drop"):
                self._pending.append(op)
            elif op.kind == "save" and op.block_hash in self._where:
                self._forget(op.block_hash)

    # -- internals ------------------------------------------------------------------------

    def _emit(self, kind: OpKind, block_hash: BlockHash, block_id: int = 0) -> None:
        self._pending.append(OffloadOp(kind, block_hash, block_id))

    def _place(self, block_hash: BlockHash, tier: Tier) -> None:
        self._lru[tier][block_hash] = None
        self._where[block_hash] = tier

    def _victim(self, tier: Tier, *, pinned_ok: bool) -> BlockHash | None:
        """The tier's least recently used hash (unpinned unless ``pinned_ok``)."""
        lru = self._lru[tier]
        if pinned_ok:
            return next(iter(lru), None)
        pinned = self._pinned
        return next((h for h in lru if h not in pinned), None)

    def _make_room(self, tier: Tier) -> bool:
        """Evict from ``tier`` until one more block fits; False if only pinned ones are left.

        A pinned block may spill (its load, ordered later, reads the file) but never drop.
        """
        lru = self._lru[tier]
        while len(lru) >= self.capacity(tier):
            spill = tier is Tier.HOST and self.disk_blocks > 0
            victim = self._victim(tier, pinned_ok=spill)
            if victim is None:
                return False
            if not spill:
                self._forget(victim)
                continue
            del lru[victim]
            del self._where[victim]
            if self._make_room(Tier.DISK):
                self._emit("spill", victim)
                self._place(victim, Tier.DISK)
                self._counts["spills"] += 1
            elif victim in self._pinned:
                self._place(victim, Tier.HOST)  # nowhere to go: it stays, the new one does not
                lru.move_to_end(victim, last=False)
                return False
            else:
                self._emit("drop", victim)
                self._counts["drops"] += 1
        return True

    def _forget(self, block_hash: BlockHash) -> None:
        tier = self._where.pop(block_hash)
        del self._lru[tier][block_hash]
        self._emit("drop", block_hash)
        self._counts["drops"] += 1

    def _forget_lost(self) -> None:
        while self._lost:
            h = self._lost.popleft()
            if h in self._where:
                self._counts["lost"] += 1
                self._forget(h)

    def statistics(self) -> OffloadIndexStats:
        c = self._counts
        return OffloadIndexStats(
            host_used=len(self._lru[Tier.HOST]),
            host_blocks=self.host_blocks,
            disk_used=len(self._lru[Tier.DISK]),
            disk_blocks=self.disk_blocks,
            num_saves=c["saves"],
            num_spills=c["spills"],
            num_drops=c["drops"],
            num_loads_host=c["loads_host"],
            num_loads_disk=c["loads_disk"],
            num_lost=c["lost"],
            num_declined=c["declined"],
            pending_ops=len(self._pending),
        )
