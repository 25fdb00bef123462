"""Two snapshots of the engine, for two readers.

* :class:`EngineStats` (``get_stats()``): figures for metrics, summed over the replicas;
  what the server's ``/metrics`` and the stats loggers read.
* :class:`EngineDebugState` (``statistics()``): every component's internal state (ledger,
  blame, each actor's mailbox and report, the supervisor tree), for debugging and tests.
"""

from __future__ import annotations

import msgspec

from actorllm.actors import ActorStatistics, SupervisorStatistics
from actorllm.core.request_stats import RequestStatsSnapshot
from actorllm.engine.recovery.blame import BlameStatistics
from actorllm.engine.recovery.ledger import LedgerStatistics
from actorllm.engine.scheduling.routing import RouterStatistics
from actorllm.worker.worker_thread import WorkerThreadStatistics


class ReplicaStats(msgspec.Struct, kw_only=True):
    """One data-parallel replica's figures (vLLM's per-``engine`` scheduler stats)."""

    engine: int  # the replica's index
    num_running_reqs: int = 0
    num_waiting_reqs: int = 0
    num_deferred_reqs: int = 0  # of the waiting: deferred, not waiting for capacity
    kv_cache_usage: float = 0.0  # 0..1
    prefix_cache_queries: int = 0  # cumulative tokens
    prefix_cache_hits: int = 0
    num_preemptions: int = 0  # cumulative
    num_open_requests: int = 0  # routed to it: waiting, running or on their way
    steps_done: int = 0  # cumulative
    iterations_done: int = 0  # as EngineStats'
    iteration_tokens: list[int] = msgspec.field(default_factory=list)  # as EngineStats'
    is_sleeping: bool = False
    num_gpu_blocks: int = 0
    actor_restarts: int = 0  # its scheduler's and executor's
    # Speculative decoding, cumulative (vLLM's spec_decode_* counters)
    spec_decode_num_drafts: int = 0
    spec_decode_num_draft_tokens: int = 0
    spec_decode_num_accepted_tokens: int = 0
    spec_decode_num_accepted_tokens_per_pos: list[int] = msgspec.field(default_factory=list)
    # LoRA: {adapter name: requests} running / waiting (vLLM's lora_requests_info)
    running_lora_adapters: dict[str, int] = msgspec.field(default_factory=dict)
    waiting_lora_adapters: dict[str, int] = msgspec.field(default_factory=dict)


class EngineStats(msgspec.Struct, kw_only=True):
    """The engine's totals (sums over the live replicas; ``kv_cache_usage`` their mean)
    and, in ``engines``, each replica's own figures."""

    num_running_reqs: int = 0
    num_waiting_reqs: int = 0
    # Of the waiting: deferred by a transient constraint (grammar compiling, tokens in
    # flight, max_loras), not waiting for capacity (SchedulerStats.num_deferred_reqs).
    num_deferred_reqs: int = 0
    kv_cache_usage: float = 0.0  # 0..1
    prefix_cache_queries: int = 0  # cumulative tokens
    prefix_cache_hits: int = 0
    connector_queries: int = 0
    connector_hits: int = 0
    num_preemptions: int = 0  # cumulative
    num_open_requests: int = 0  # in the ledger (includes requests not yet scheduled)
    steps_done: int = 0  # cumulative
    # Steps that produced outputs (cumulative), and vLLM's iteration tokens of the most
    # recent of them (at most 4096; computed prompt tokens of prefills that ended plus
    # generated tokens), newest last: the last ``iterations_done - previously_seen`` entries
    # are new to a reader. With several replicas: empty (their steps interleave); each
    # one's is in ``engines``.
    iterations_done: int = 0
    iteration_tokens: list[int] = msgspec.field(default_factory=list)
    is_sleeping: bool = False
    kv_connector_enabled: bool = False
    actor_restarts: dict[str, int] = msgspec.field(default_factory=dict)  # {actor: restarts}
    mailbox_depth: dict[str, int] = msgspec.field(default_factory=dict)  # {actor: queued}
    num_gpu_blocks: int = 0  # KV-cache blocks
    # Streamed outputs a caller had not read when the next came (sent as one), cumulative.
    stream_outputs_merged: int = 0
    # Speculative decoding, cumulative, summed over the replicas: requests' steps that
    # verified drafts, draft tokens verified, drafts accepted, accepted per draft position.
    spec_decode_num_drafts: int = 0
    spec_decode_num_draft_tokens: int = 0
    spec_decode_num_accepted_tokens: int = 0
    spec_decode_num_accepted_tokens_per_pos: list[int] = msgspec.field(default_factory=list)
    # LoRA, summed over the replicas: {adapter name: requests} running / waiting
    running_lora_adapters: dict[str, int] = msgspec.field(default_factory=dict)
    waiting_lora_adapters: dict[str, int] = msgspec.field(default_factory=dict)
    # Per-request statistics since start (core/request_stats.py): latencies, token counts.
    requests: RequestStatsSnapshot | None = None
    engines: list[ReplicaStats] = msgspec.field(default_factory=list)  # in replica order

    @property
    def prefix_cache_hit_rate(self) -> float:
        return (
            self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else 0.0
        )


class EngineDebugState(msgspec.Struct, frozen=True, kw_only=True):
    """``AsyncEngine.statistics()``: internal state, for debugging and tests."""

    ledger: LedgerStatistics
    blame: BlameStatistics
    worker_thread: WorkerThreadStatistics
    # {actor: its statistics}; ``.report`` is the actor's own state (the scheduler's
    # AdmissionStatistics: steps in flight, probation, sleep; the output processor's
    # OutputProcessorStatistics).
    actors: dict[str, ActorStatistics]
    supervisor: SupervisorStatistics | None
    routing: RouterStatistics | None = None  # data-parallel routing (engine/scheduling/routing.py)
