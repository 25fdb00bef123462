"""``EngineStats``: one snapshot of the engine for metrics and ``get_stats()``."""

from __future__ import annotations

import msgspec

from actorllm.actors import ActorStatistics, SupervisorStatistics
from actorllm.core.request_stats import RequestStatsSnapshot
from actorllm.engine.blame import BlameStatistics
from actorllm.engine.ledger import LedgerStatistics
from actorllm.worker.worker_thread import WorkerThreadStatistics


class EngineStats(msgspec.Struct, kw_only=True):
    num_running_reqs: int = 0
    num_waiting_reqs: int = 0
    kv_cache_usage: float = 0.0  # 0..1
    prefix_cache_queries: int = 0  # cumulative tokens
    prefix_cache_hits: int = 0
    connector_queries: int = 0
    connector_hits: int = 0
    num_preemptions: int = 0  # cumulative
    num_open_requests: int = 0  # in the ledger (includes requests not yet scheduled)
    steps_done: int = 0  # cumulative
    # Tokens of the most recent steps (at most 4096), newest last: the last
    # ``steps_done - previously_seen`` entries are new to a reader.
    iteration_tokens: list[int] = msgspec.field(default_factory=list)
    is_sleeping: bool = False
    kv_connector_enabled: bool = False
    actor_restarts: dict[str, int] = msgspec.field(default_factory=dict)  # {actor: restarts}
    mailbox_depth: dict[str, int] = msgspec.field(default_factory=dict)  # {actor: queued}
    num_gpu_blocks: int = 0  # KV-cache blocks
    # Per-request statistics since start (core/request_stats.py): latencies, token counts.
    requests: RequestStatsSnapshot | None = None

    @property
    def prefix_cache_hit_rate(self) -> float:
        return (
            self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else 0.0
        )


class EngineStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """``AsyncEngine.statistics()``: internal state, for debugging and tests."""

    ledger: LedgerStatistics
    blame: BlameStatistics
    worker_thread: WorkerThreadStatistics
    # {actor: its statistics}; ``.report`` is the actor's own state (the scheduler's
    # AdmissionStatistics: steps in flight, probation, sleep; the output processor's
    # OutputProcessorStatistics).
    actors: dict[str, ActorStatistics]
    supervisor: SupervisorStatistics | None
