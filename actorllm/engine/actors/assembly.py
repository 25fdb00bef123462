"""Building the engine: its shared parts and its data-parallel replicas, and the actor tree.

``build_engine`` loads the tokenizer once and, for each of ``data_parallel_size`` replicas,
starts a worker thread, builds a model runner on it (its own weights and KV cache) and the
replica's :class:`~actorllm.engine.recovery.admission.Admission` (its own scheduler core and prefix
cache). ``start_actors`` then starts the tree, sinks first (docs/architecture.md §2)::

    engine (ONE_FOR_ONE, the dead-letter policy)
    ├── output_processor                    shared
    ├── core  (ONE_FOR_ALL: executor, scheduler)     one per replica: core0, core1, ...
    ├── input_processor                     shared
    └── router                              shared, routes to the replicas

Each replica's core is a subtree supervised on its own: its crash restarts only it, and it
recovers its own requests from the ledger. With one replica the core is PERMANENT, as the
engine always was: when it gives up, the engine dies. With several, each core is TEMPORARY
with an exit hook: one that gives up is removed, the router moves its open requests to the
others (``ReplicaDown``), and the engine dies only with its last replica.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from actorllm.actors import (
    ActorStopped,
    Backoff,
    ChildSpec,
    MailboxFull,
    Restart,
    Strategy,
    Supervisor,
    SupervisorEscalation,
)
from actorllm.core.input_processor import InputProcessor
from actorllm.core.request_stats import RequestStats
from actorllm.core.scheduler import Scheduler
from actorllm.core.scheduler.kv_connector import KVConnectorBase
from actorllm.engine.actors.context import EngineContext, ModelInfo
from actorllm.engine.actors.executor import ExecutorActor
from actorllm.engine.actors.input_processor import InputProcessorActor
from actorllm.engine.actors.messages import CoreRefs, EngineRefs, GrammarReady, ReplicaDown
from actorllm.engine.actors.output_processor import OutputProcessorActor
from actorllm.engine.actors.router import RouterActor
from actorllm.engine.actors.scheduler import SchedulerActor
from actorllm.engine.actors.startup import (
    RunnerFactory,
    build_remote_worker,
    build_runner,
    build_scheduler_config,
    build_tokenizer,
    remote_spec,
)
from actorllm.engine.config.engine_config import EngineConfig
from actorllm.engine.config.reasoning_config import thinking_markers
from actorllm.engine.recovery.admission import Admission
from actorllm.engine.recovery.blame import Blame
from actorllm.engine.recovery.dead_letters import DeadLetterPolicy
from actorllm.engine.recovery.ledger import RequestLedger
from actorllm.engine.recovery.lora_record import LoRARecord
from actorllm.engine.scheduling.routing import ReplicaRouter
from actorllm.engine.scheduling.structured_outputs import StructuredOutputs, structured_outputs_for
from actorllm.worker.extension import worker_class
from actorllm.worker.worker import ReplicaWorker
from actorllm.worker.worker_thread import WorkerThread


@dataclass(eq=False)
class Replica:
    """One data-parallel engine core: its context (own refs view and Admission), its worker
    thread and the worker it drives (a local Worker, or a RemoteWorker under Ray)."""

    index: int
    ctx: EngineContext
    thread: WorkerThread
    worker: ReplicaWorker

    @property
    def name(self) -> str:
        """The core subtree's name in the supervision tree."""
        return "core" if self.ctx.config.data_parallel_size == 1 else f"core{self.index}"


@dataclass(eq=False)
class EngineParts:
    """Everything the actors are built from; the first replica's context is the engine's."""

    config: EngineConfig
    info: ModelInfo
    tokenizer: Any
    inputs: InputProcessor
    structured: StructuredOutputs | None
    replicas: list[Replica]
    routing: ReplicaRouter
    request_stats: RequestStats
    live: set[int]  # replicas whose core has not given up (the exit hooks remove them)

    @property
    def ctx(self) -> EngineContext:
        return self.replicas[0].ctx


def logits_processor_checks(config: EngineConfig) -> list[Any]:
    """The custom logits processors' ``validate_params`` (plugins included); loaded only
    when some are configured or installed."""
    from actorllm.worker.logitsprocs.loader import plugin_classes

    if not config.logits_processors and not plugin_classes():
        return []
    from actorllm.worker.logitsprocs.state import param_checks

    return param_checks(config.logits_processors or ())


async def build_replica(
    index: int,
    config: EngineConfig,
    thread: WorkerThread,
    factory: RunnerFactory,
    connector_factory: Callable[[], KVConnectorBase] | None,
) -> tuple[ReplicaWorker, ModelInfo, Callable[[], KVConnectorBase] | None]:
    """Build replica ``index``'s runner on its worker thread; returns its worker, the model
    info and the connector factory of its cores. The Ray backend builds it in a Ray actor
    instead, driven from the thread (worker/remote.py); except under pipeline parallel,
    where rank 0 (the last stage, which samples) stays on the thread so that it can send
    the next step to the first stage while the stages work (a Ray actor runs one call at
    a time), and only the earlier stages are Ray actors (worker/tp_group.py)."""
    if config.distributed_executor_backend == "ray" and config.pipeline_parallel_size == 1:
        if connector_factory is not None:
            raise ValueError(
                "kv_connector: a KV connector works on the KV cache beside the scheduler; "
                "with distributed_executor_backend ray the cache is in a Ray actor."
            )
        from actorllm.worker.remote import RemoteWorker

        build = functools.partial(build_remote_worker, config, factory, index)
        remote, info = await thread.call(
            lambda: RemoteWorker.start(remote_spec(config, index), build)
        )
        assert isinstance(info, ModelInfo)
        return remote, info, None
    runner, info, tp_group = await build_runner(config, thread, factory, index)
    store = None
    if connector_factory is None and config.kv_connector == "offload":
        from actorllm.engine.kv_offload import make_offload_connector

        tier = make_offload_connector(config, int(runner.kv_cache_bytes_per_block()))
        connector_factory, store = tier.new_connector, tier.store
    worker = worker_class(config.worker_extension_cls)(
        runner,
        thread.has_queued_jobs,
        offload_store=store,
        profiler_dir=config.profiler_dir,
        cuda=config.resolved_device() == "cuda",
        tp=tp_group,
        device=config.resolved_device(),
    )
    return worker, info, connector_factory


async def build_engine(
    config: EngineConfig,
    threads: list[WorkerThread],
    factory: RunnerFactory,
    tokenizer: Any,
    connector_factory: Callable[[], KVConnectorBase] | None,
) -> EngineParts:
    """Load the tokenizer and build one replica per started thread in ``threads``."""
    tok = await build_tokenizer(config, tokenizer)
    ledger, blame = RequestLedger(config.max_stream_backlog), Blame()
    loras = LoRARecord()  # shared, as the ledger: adapters are loaded on every replica
    shared_cores: list[CoreRefs] = []
    structured: StructuredOutputs | None = None
    replicas: list[Replica] = []
    info: ModelInfo | None = None
    built: list[tuple[WorkerThread, ReplicaWorker]] = []
    try:
        workers = await _build_workers(config, threads, factory, connector_factory, built)
        for index, thread in enumerate(threads):
            worker, info, make_connector = workers[index]
            if structured is None and tok is not None:
                structured = structured_outputs_for(config, tok, info)
            refs = EngineRefs(cores=shared_cores)
            admission = Admission(
                ledger,
                blame,
                make_core=_core_factory(config, info, refs, structured, make_connector),
                # Pipeline parallel: a batch per stage (vLLM's max_concurrent_batches).
                max_inflight=max(
                    config.pipeline_parallel_size,
                    2 if config.resolved_async_scheduling(info.pooling is not None) else 1,
                ),
                has_connector=make_connector is not None,
                kv_connector_enabled=config.kv_connector_enabled,
                replica=None if len(threads) == 1 else index,
            )
            ctx = EngineContext(
                config=config,
                model=info,
                ledger=ledger,
                refs=refs,
                blame=blame,
                admission=admission,
                loras=loras,
            )
            replicas.append(Replica(index, ctx, thread, worker))
    except BaseException:
        # The replicas built so far never start: stop their rank groups (tensor parallel),
        # queued on their threads, which run it before they exit.
        for done_thread, done_worker in built:
            done_thread.submit(done_worker.shutdown)
        raise
    assert info is not None  # at least one replica
    inputs = InputProcessor(
        tok,
        vocab_size=info.vocab_size,
        max_model_len=info.max_model_len,
        eos_token_ids=info.eos_token_ids,
        max_logprobs=config.max_logprobs,
        param_checks=logits_processor_checks(config),
        thinking_markers=thinking_markers(config.reasoning_config, config.reasoning_parser, tok),
        watermark=config.watermarking(),
        return_sampling_mask=config.return_sampling_mask,
    )
    routing = ReplicaRouter(len(threads), block_size=config.resolved_block_size())
    return EngineParts(
        config=config,
        info=info,
        tokenizer=tok,
        inputs=inputs,
        structured=structured,
        replicas=replicas,
        routing=routing,
        request_stats=RequestStats(
            info.max_model_len, config.custom_histogram_buckets, config.watermarking()
        ),
        live={r.index for r in replicas},
    )


async def _build_workers(
    config: EngineConfig,
    threads: list[WorkerThread],
    factory: RunnerFactory,
    connector_factory: Callable[[], KVConnectorBase] | None,
    built: list[tuple[WorkerThread, ReplicaWorker]],
) -> list[tuple[ReplicaWorker, ModelInfo, Callable[[], KVConnectorBase] | None]]:
    """Every replica's Worker (appended to ``built`` as each is ready). One after the other
    in this process (the replicas share its cores and its GIL); at once with Ray, where
    each loads in an actor of its own, on its own node: opening takes one load, not M.
    A replica that fails raises once every other has finished (so ``built`` holds all
    that must be stopped)."""
    # A worker_extension_cls that cannot be used stops the start here, before any rank
    # is spawned or model loaded (each rank resolves it again, in its own process).
    worker_class(config.worker_extension_cls)
    if config.distributed_executor_backend != "ray" or len(threads) == 1:
        results = []
        for index, thread in enumerate(threads):
            results.append(await build_replica(index, config, thread, factory, connector_factory))
            built.append((thread, results[-1][0]))
        return results
    outcomes: list[Any] = [None] * len(threads)

    async def one(index: int, thread: WorkerThread) -> None:
        try:
            outcomes[index] = await build_replica(index, config, thread, factory, connector_factory)
            built.append((thread, outcomes[index][0]))
        except Exception as exc:  # raised below, after the others are built
            outcomes[index] = exc

    async with anyio.create_task_group() as tg:
        for index, thread in enumerate(threads):
            tg.start_soon(one, index, thread)
    for outcome in outcomes:
        if isinstance(outcome, Exception):
            raise outcome
    return outcomes


def _core_factory(
    config: EngineConfig,
    info: ModelInfo,
    refs: EngineRefs,
    structured: StructuredOutputs | None,
    make_connector: Callable[[], KVConnectorBase] | None,
) -> Callable[[], Scheduler]:
    sched_config = build_scheduler_config(config, info)
    if make_connector is not None and len(info.kv_group_windows) > 1:
        # Refused here, at start, with the flags' names: the Scheduler would refuse it too,
        # but from inside the scheduler actor, as a crash the supervisor keeps restarting.
        raise ValueError(
            f"kv_connector: a KV connector keys blocks by one block table; this model has "
            f"{len(info.kv_group_windows)} KV cache groups (sliding-window and full-attention "
            "layers). Start it without --kv-transfer-config, or with "
            "--disable-hybrid-kv-cache-manager."
        )

    def wake_scheduler() -> None:  # on the loop, when a grammar finished compiling
        with contextlib.suppress(Exception):  # full mailbox: it pumps soon anyway
            refs.scheduler.send_nowait(GrammarReady())

    def make_core() -> Scheduler:
        connector = make_connector() if make_connector is not None else None
        grammar = structured.tracker(wake_scheduler) if structured is not None else None
        return Scheduler(sched_config, kv_connector=connector, grammar=grammar)

    return make_core


def backoff_of(config: EngineConfig) -> Backoff | None:
    initial = config.restart_backoff_s
    if initial <= 0:
        return None
    return Backoff(initial=initial, maximum=max(initial, 10 * initial))


async def start_actors(sup: Supervisor, parts: EngineParts) -> None:
    """Start the actor tree under the root ``sup`` (sinks first) and fill every replica's
    refs."""
    config = parts.config
    ctx = parts.ctx
    views = [r.ctx.refs for r in parts.replicas]

    def spec(name: str, cls: Any, *args: Any) -> ChildSpec[Any]:
        return ChildSpec(
            name,
            cls,
            args=args,
            restart=Restart.PERMANENT,
            mailbox_size=config.mailbox_size,
            shutdown_timeout=config.actor_shutdown_timeout_s,
            message_deadline=config.actor_message_deadline_s,
        )

    output = await sup.start_child(
        spec("output_processor", OutputProcessorActor, ctx, parts.tokenizer, parts.request_stats)
    )
    for view in views:
        view.output_processor = output
    live = parts.live
    for replica in parts.replicas:
        rctx = replica.ctx
        core = await sup.start_child(
            ChildSpec.supervisor(
                replica.name,
                strategy=Strategy.ONE_FOR_ALL,
                children=[
                    spec("executor", ExecutorActor, rctx, replica.thread, replica.worker),
                    spec("scheduler", SchedulerActor, rctx),
                ],
                max_restarts=config.max_restarts,
                within=config.restart_window_s,
                backoff=backoff_of(config),
                dead_letter=DeadLetterPolicy(rctx),
                restart=Restart.PERMANENT if len(views) == 1 else Restart.TEMPORARY,
                on_exit=None if len(views) == 1 else _on_replica_exit(replica, live),
            )
        )
        rctx.refs.executor = core.ref("executor")
        rctx.refs.scheduler = core.ref("scheduler")
        rctx.refs.cores.append(CoreRefs(scheduler=rctx.refs.scheduler, executor=rctx.refs.executor))
    inputs = await sup.start_child(
        spec("input_processor", InputProcessorActor, ctx, parts.inputs, parts.structured)
    )
    for view in views:
        view.input_processor = inputs
    router = await sup.start_child(spec("router", RouterActor, ctx, parts.routing, live))
    for view in views:
        view.router = router


def _on_replica_exit(replica: Replica, live: set[int]) -> Callable[[BaseException | None], None]:
    """The hook run when a replica's core gave up: it leaves ``live`` and the router is
    told (at once, or, when its mailbox is full, at its next message: it compares its live
    replicas with ``live`` every time); the last replica's end is the engine's (escalated
    from the root)."""

    def gone(exc: BaseException | None) -> None:
        live.discard(replica.index)
        # Its worker never steps again: stop its rank group now (tensor parallel), so its
        # processes or Ray bundles are not held until the engine closes.
        replica.thread.submit(replica.worker.shutdown)
        config = replica.ctx.config
        if not live:
            raise SupervisorEscalation(
                replica.name, exc, config.max_restarts, config.restart_window_s
            )
        with contextlib.suppress(MailboxFull, ActorStopped):
            replica.ctx.refs.router.send_nowait(
                ReplicaDown(replica=replica.index, reason=repr(exc))
            )

    return gone
