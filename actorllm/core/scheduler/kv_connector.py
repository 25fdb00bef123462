"""The scheduler side of a KV connector: KV that lives outside the GPU pool.

After vLLM's ``KVConnectorBase_V1`` (scheduler half). A connector knows blocks stored
elsewhere — host memory, disk, another instance — by their prefix-cache hash. The scheduler
asks it, for a request that is about to start, how many tokens beyond the local prefix-cache
hit it can load; it allocates fresh blocks for them, and the connector records which hashes
go into which block ids. After each ``schedule()`` the connector turns what it recorded
into a :class:`KVConnectorMetadata` that the worker side executes before the step's forward
(loads) or after it (saves). The scheduler does not put this metadata on ``SchedulerOutput``
(a fixed contract): fetch it with ``Scheduler.take_connector_metadata()`` right after
``schedule()`` and send it along with that step.

When the scheduler's connector is disabled (``set_kv_connector_enabled(False)``) it calls
none of these methods: no external lookups, no metadata. :class:`ConnectorLink` is the
scheduler's end of it: the connector (or none), that switch, and the counters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, final

import msgspec

from actorllm.core.kv_cache.block_hash import BlockHash
from actorllm.core.scheduler_output import SchedulerOutput

if TYPE_CHECKING:
    from actorllm.core.kv_cache import KVCacheManager
    from actorllm.core.kv_cache.free_queue import KVCacheBlock
    from actorllm.core.request import Request


class KVConnectorMetadata(msgspec.Struct, frozen=True, kw_only=True):
    """What the worker-side connector does around one step."""

    step_id: int
    # (block_hash, block_id): copy the stored KV of block_hash into block_id before the step.
    loads: list[tuple[BlockHash, int]] = msgspec.field(default_factory=list)
    # (block_hash, block_id): store block_id's KV under block_hash (after the step computed it).
    saves: list[tuple[BlockHash, int]] = msgspec.field(default_factory=list)


class KVConnectorBase:
    """Scheduler-side connector interface. Subclass it; every method runs on the scheduler.

    Methods must not block: they are called inside ``schedule()`` / ``update_from_output()``.
    """

    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> int:
        """Tokens after the first ``num_computed_tokens`` (the local hit) that can be loaded.

        The scheduler caps the answer so at least the last known token is computed.
        """
        return 0

    def update_state_after_alloc(
        self, request: Request, blocks: Sequence[KVCacheBlock], num_external_tokens: int
    ) -> None:
        """The request was admitted: ``blocks`` is its whole block table; the external
        tokens occupy positions ``[local_hit, local_hit + num_external_tokens)``."""

    def request_finished(self, request: Request, block_ids: list[int]) -> None:
        """The request finished (any reason); its blocks are freed right after this call."""

    def on_block_evicted(self, block_hash: BlockHash, block_id: int) -> None:
        """A cached block is about to be reused for other content (save it now or lose it)."""

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        """Hand-off for the step just scheduled; resets what the connector recorded."""
        return KVConnectorMetadata(step_id=scheduler_output.step_id)


@final
class ConnectorLink:
    """The scheduler's end of its KV connector, or of none: the run-time switch, the
    hand-off of the step just scheduled, and the lookup counters. While the switch is off
    (always, without a connector) every call is a no-op that asks the connector nothing."""

    __slots__ = ("_connector", "_enabled", "_meta", "hits", "queries")

    def __init__(self, connector: KVConnectorBase | None, kv: KVCacheManager) -> None:
        """Raises ``ValueError`` when ``kv`` has more than one KV cache group (a connector
        keys blocks by one block table)."""
        self._connector = connector
        self._enabled = connector is not None
        self._meta: KVConnectorMetadata | None = None  # the last step's hand-off, until taken
        self.queries = 0  # tokens asked about (cumulative)
        self.hits = 0  # tokens the connector could load (cumulative)
        if connector is not None:
            if kv.num_groups > 1:
                raise ValueError(
                    "kv_connector: a KV connector keys blocks by one block table; this model "
                    f"has {kv.num_groups} KV cache groups (sliding and full attention layers). "
                    "Start it without a connector, or with disable_hybrid_kv_cache_manager."
                )
            kv.eviction_callbacks.append(self._on_block_evicted)

    @property
    def enabled(self) -> bool:
        return self._enabled

    def set_enabled(self, enabled: bool) -> None:
        """Switch the connector at run time; raises ``ValueError`` if there is none."""
        if enabled and self._connector is None:
            raise ValueError("this scheduler has no KV connector.")
        self._enabled = enabled

    def _active(self) -> KVConnectorBase | None:
        return self._connector if self._enabled else None

    def lookup(self, req: Request, num_hit: int) -> int:
        """Tokens of ``req`` past its local hit of ``num_hit`` that the connector loads."""
        connector = self._active()
        if connector is None:
            return 0
        n = connector.get_num_new_matched_tokens(req, num_hit)
        n = max(0, min(n, req.num_tokens - 1 - num_hit))  # the last token is always computed
        self.queries += req.num_tokens - num_hit
        self.hits += n
        return n

    def allocated(self, req: Request, kv: KVCacheManager, num_external: int) -> None:
        """``req`` was admitted with ``num_external`` tokens to load."""
        connector = self._active()
        if connector is not None:
            connector.update_state_after_alloc(req, kv.get_blocks(req.request_id), num_external)

    def finished(self, req: Request, kv: KVCacheManager) -> None:
        """``req`` finished; its blocks in ``kv`` are freed right after this call."""
        connector = self._active()
        if connector is not None:
            connector.request_finished(req, kv.get_block_ids(req.request_id)[0])

    def scheduled(self, scheduler_output: SchedulerOutput) -> None:
        """A step was scheduled: keep the connector's hand-off for it."""
        connector = self._active()
        if connector is not None:
            self._meta = connector.build_connector_meta(scheduler_output)

    def take_meta(self) -> KVConnectorMetadata | None:
        """The hand-off of the step just scheduled (once), or None."""
        meta, self._meta = self._meta, None
        return meta

    def _on_block_evicted(self, block_hash: BlockHash, block_id: int) -> None:
        connector = self._active()
        if connector is not None:
            connector.on_block_evicted(block_hash, block_id)
