"""The KV offload tier: a block's KV kept in host memory and on disk after the device pool
evicts it, keyed by its prefix-cache hash, and loaded back when a request needs it again.

Two halves, one per side of the step hand-off (docs/kv_connector.md has the whole story):

* scheduler side, no torch — :class:`OffloadIndex` (what is stored, where, LRU, capacities;
  it decides and emits ops) and :class:`OffloadConnector` (the core ``Scheduler``'s
  ``KVConnectorBase``; turns callbacks into index decisions, hands ops over per step as
  :class:`OffloadMetadata`);
* worker side, torch — :class:`OffloadStore` (``worker/offload_store.py``: executes the
  ops, ``worker/offload_ops.py``, against the runner's KV tensors, on the worker thread,
  before the step's forward).

:func:`make_offload_connector` builds both for an engine.
"""

from actorllm.engine.kv_offload.connector import OffloadConnector, OffloadConnectorStats
from actorllm.engine.kv_offload.factory import DEFAULT_DISK_BYTES, make_offload_connector
from actorllm.engine.kv_offload.index import OffloadIndex, OffloadIndexStats
from actorllm.worker.offload_ops import OffloadMetadata, OffloadOp, OpKind, Tier
from actorllm.worker.offload_store import (
    OffloadMissError,
    OffloadStateError,
    OffloadStore,
    OffloadStoreStats,
    runner_kv_caches,
)

__all__ = [
    "DEFAULT_DISK_BYTES",
    "OffloadConnector",
    "OffloadConnectorStats",
    "OffloadIndex",
    "OffloadIndexStats",
    "OffloadMetadata",
    "OffloadMissError",
    "OffloadOp",
    "OffloadStateError",
    "OffloadStore",
    "OffloadStoreStats",
    "OpKind",
    "Tier",
    "make_offload_connector",
    "runner_kv_caches",
]
