"""What the scheduler-side offload index tells the worker-side store to do.

An :class:`OffloadOp` is one instruction against one block hash. The ops of a step form an
ordered list, executed in that order before the step's forward:

* ``save``  — copy device block ``block_id`` (every layer, K and V) into host memory.
* ``load``  — copy the stored KV back into device block ``block_id`` (from host or disk).
* ``spill`` — move the host copy to disk and free the host memory.
* ``drop``  — forget the stored copy (host or disk).

The order is the order in which the scheduler made the decisions, which is what makes every
same-step interplay right: a block evicted (``save``) and reused for a load in the same step
is saved before it is overwritten; a hash saved and then loaded by another request in the
same step is read after it was written; a hash loaded and then dropped (capacity) is read
before it disappears.

:class:`OffloadMetadata` is the ``KVConnectorMetadata`` the offload connector hands over:
``loads`` and ``saves`` keep the base contract (for statistics and for any other consumer);
``ops`` is the authoritative, ordered list the store executes.
"""

from __future__ import annotations

import enum
from typing import Literal

import msgspec

from actorllm.core.kv_cache.block_hash import BlockHash
from actorllm.core.scheduler.kv_connector import KVConnectorMetadata

OpKind = Literal["save", "load", "spill", "drop"]


class Tier(enum.Enum):
    """Where the index keeps a block's KV."""

    HOST = "host"
    DISK = "disk"


class OffloadOp(msgspec.Struct, frozen=True, array_like=True):
    """One store instruction. ``block_id`` is the device block (save/load only; else 0)."""

    kind: OpKind
    block_hash: BlockHash
    block_id: int = 0


class OffloadMetadata(KVConnectorMetadata, frozen=True, kw_only=True):
    """``KVConnectorMetadata`` plus the ordered ops; the store executes ``ops`` only."""

    ops: list[OffloadOp] = msgspec.field(default_factory=list)

    @classmethod
    def from_ops(cls, step_id: int, ops: list[OffloadOp]) -> OffloadMetadata:
        return cls(
            step_id=step_id,
            loads=[(o.block_hash, o.block_id) for o in ops if o.kind == "load"],
            saves=[(o.block_hash, o.block_id) for o in ops if o.kind == "save"],
            ops=ops,
        )
