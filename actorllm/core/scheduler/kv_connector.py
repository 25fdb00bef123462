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
none of these methods: no external lookups, no metadata.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec

from actorllm.core.kv_cache.block_hash import BlockHash
from actorllm.core.scheduler_output import SchedulerOutput

if TYPE_CHECKING:
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
