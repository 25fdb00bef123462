"""Wiring the offload tier into an engine: one index and one store per engine."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from actorllm.engine.config.engine_config import EngineConfig
from actorllm.engine.kv_offload.connector import OffloadConnector
from actorllm.engine.kv_offload.index import OffloadIndex
from actorllm.worker.offload_store import OffloadStore

# Disk tier size when the config names a directory but no size (EngineConfig has no field
# for it yet; ``kv_offload_disk_bytes`` is read if it appears).
DEFAULT_DISK_BYTES = 8 * 2**30


@dataclass(frozen=True)
class OffloadTier:
    """The two halves of one engine's offload tier."""

    new_connector: Callable[[], OffloadConnector]  # one per scheduler core, sharing the index
    index: OffloadIndex  # scheduler side (outlives core rebuilds)
    store: OffloadStore  # worker side: ``apply(runner, meta)`` before each step's forward


def make_offload_connector(
    config: EngineConfig,
    block_bytes: int,
    *,
    write_through: bool | None = None,
    disk_bytes: int | None = None,
) -> OffloadTier:
    """Build the engine's offload index and store, and the per-core connector factory.

    Capacities in blocks are the configured bytes over ``block_bytes`` (the runner's
    ``kv_cache_bytes_per_block()``; host: ``config.kv_offload_host_bytes``; disk, only with
    ``config.kv_offload_disk_dir``: ``disk_bytes``, else ``config.kv_offload_disk_bytes`` if
    present, else 8 GiB). ``write_through`` (default ``config.kv_offload_write_through``)
    also saves finished requests' blocks. Call once per engine: every connector the factory
    returns shares the index, which outlives scheduler rebuilds.
    """
    if block_bytes <= 0:
        raise ValueError(f"the runner reports {block_bytes} bytes per KV block.")
    host_blocks = config.kv_offload_host_bytes // block_bytes
    disk_blocks = 0
    if config.kv_offload_disk_dir is not None:
        if disk_bytes is None:
            disk_bytes = getattr(config, "kv_offload_disk_bytes", None) or DEFAULT_DISK_BYTES
        disk_blocks = disk_bytes // block_bytes
    index = OffloadIndex(host_blocks, disk_blocks)
    # Lost hashes cross from the worker thread (report_lost is thread-safe: a deque append).
    store = OffloadStore(config.kv_offload_disk_dir, on_lost=index.report_lost)
    block_size = config.resolved_block_size()
    if write_through is None:
        write_through = config.kv_offload_write_through

    def new_connector() -> OffloadConnector:
        return OffloadConnector(index, block_size, write_through=write_through)

    return OffloadTier(new_connector, index, store)
