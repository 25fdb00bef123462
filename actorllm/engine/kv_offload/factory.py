"""Wiring the offload tier into an engine: one index and one store per engine."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from actorllm.engine.kv_offload.connector import OffloadConnector
from actorllm.engine.kv_offload.index import OffloadIndex
from actorllm.engine.kv_offload.store import OffloadStore

if TYPE_CHECKING:
    from actorllm.engine.context import EngineContext

# Disk tier size when the config names a directory but no size (EngineConfig has no field
# for it yet; ``kv_offload_disk_bytes`` is read if it appears).
DEFAULT_DISK_BYTES = 8 * 2**30


def make_offload_connector(
    ctx: EngineContext, *, write_through: bool = False, disk_bytes: int | None = None
) -> Callable[[], OffloadConnector]:
    """Build the engine's offload index and store; return the per-core connector factory.

    Capacities in blocks are the configured bytes over ``runner.kv_cache_bytes_per_block()``
    (host: ``config.kv_offload_host_bytes``; disk, only with ``config.kv_offload_disk_dir``:
    ``disk_bytes``, else ``config.kv_offload_disk_bytes`` if present, else 8 GiB).

    Side effects on ``ctx`` (the executor reads the first): ``ctx.kv_offload_store`` — the
    :class:`OffloadStore` whose ``apply(runner, meta)`` runs on the worker thread before each
    ``runner.execute``; ``ctx.kv_offload_index`` — the :class:`OffloadIndex`, for statistics.
    Call once per engine: every connector the factory returns shares the index, which
    outlives scheduler rebuilds. ``kv_cache_bytes_per_block`` only reads the model config,
    so calling it here, off the worker thread, is safe.
    """
    cfg = ctx.config
    block_bytes = int(ctx.runner.kv_cache_bytes_per_block())
    if block_bytes <= 0:
        raise ValueError(f"the runner reports {block_bytes} bytes per KV block.")
    host_blocks = cfg.kv_offload_host_bytes // block_bytes
    disk_blocks = 0
    if cfg.kv_offload_disk_dir is not None:
        if disk_bytes is None:
            disk_bytes = getattr(cfg, "kv_offload_disk_bytes", None) or DEFAULT_DISK_BYTES
        disk_blocks = disk_bytes // block_bytes
    index = OffloadIndex(host_blocks, disk_blocks)
    store = OffloadStore(cfg.kv_offload_disk_dir, on_lost=index.report_lost)
    ctx.kv_offload_store = store
    ctx.kv_offload_index = index
    block_size = cfg.block_size

    def new_connector() -> OffloadConnector:
        return OffloadConnector(index, block_size, write_through=write_through)

    return new_connector
