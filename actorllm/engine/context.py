"""``EngineContext``: what the engine's actors share, kept beside them so it survives restarts.

Actors are rebuilt from their ``ChildSpec`` factory at every restart; anything that must
outlive one incarnation lives here: the configuration, the request ledger, the worker
thread with the loaded model, refs to the other actors' mailboxes, and the core epoch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from actorllm.core.request_stats import RequestStats
from actorllm.engine.config import EngineConfig
from actorllm.engine.input_processing import InputProcessing
from actorllm.engine.ledger import RequestLedger
from actorllm.worker.worker_thread import WorkerThread


@dataclass
class ModelInfo:
    """What the engine needs to know about the loaded model."""

    vocab_size: int
    max_model_len: int
    eos_token_ids: list[int]
    num_blocks: int  # KV blocks, including the null block


@dataclass
class FaultPlan:
    """Faults armed by the test harness: crash ``actor`` when ``predicate(msg)`` holds."""

    actor: str
    predicate: Callable[[Any], bool]
    exc: BaseException
    remaining: int = 1  # how many times to fire


@dataclass
class EngineContext:
    config: EngineConfig
    ledger: RequestLedger
    worker: WorkerThread
    runner: Any  # ModelRunner or ScriptedModel; touched only on the worker thread
    model: ModelInfo
    inputs: InputProcessing
    tokenizer: Any  # the Hugging Face tokenizer (None: detokenization off)
    refs: dict[str, Any] = field(default_factory=dict)  # {actor name: ActorRef}
    # Grows whenever the scheduler rebuilds its state from the ledger; older messages are
    # dropped. Written by the scheduler actor only.
    core_epoch: int = 0
    # {step_id: user-facing request ids in that step}, for steps handed to the executor and
    # not yet done. Kept here so a crashed core can charge the crash to them.
    inflight: dict[int, list[str]] = field(default_factory=dict)
    sleeping: int = 0  # sleep level, 0 = awake
    faults: list[FaultPlan] = field(default_factory=list)
    # Stop-string aborts the output processor could not send without blocking (the
    # scheduler drains this after every message; see the deadlock rule in actors/scheduler).
    pending_aborts: list[str] = field(default_factory=list)
    # Children of requests failed outside the scheduler (poison requests): the scheduler
    # finishes them FINISHED_ERROR after its next message.
    pending_aborts_error: list[str] = field(default_factory=list)
    # Builds the scheduler-side KV connector for each new core (None: no connector).
    connector_factory: Callable[[], Any] | None = None
    kv_connector_enabled: bool = True
    # The worker-side half of the KV connector (engine/kv_offload.py); used on the worker
    # thread only.
    kv_offload_store: Any = None
    kv_offload_index: Any = None  # the scheduler-side index (statistics)
    # Launch-ahead of queued steps on the worker thread (worker/step_pipeline.py); built
    # with the runner, used on the worker thread only.
    pipeline: Any = None
    # Tokens scheduled in each recent step, newest last (the metrics histogram reads the
    # tail it has not seen, using steps_done as its cursor).
    iteration_tokens: deque[int] = field(default_factory=lambda: deque(maxlen=4096))
    # {actor name: its current incarnation}; read by the test harness's invariant checks.
    live: dict[str, Any] = field(default_factory=dict)
    # Lifetime counters for get_stats (the supervisor's counts reset with each incarnation).
    steps_done: int = 0
    # Per-request statistics (vLLM's request metrics), fed by the output processor.
    request_stats: RequestStats | None = None

    def ref(self, name: str) -> Any:
        return self.refs[name]

    def maybe_fault(self, actor: str, msg: Any) -> None:
        """Raise an armed fault for ``actor`` if one matches ``msg`` (test harness hook)."""
        for plan in self.faults:
            if plan.actor == actor and plan.remaining > 0 and plan.predicate(msg):
                plan.remaining -= 1
                raise plan.exc
