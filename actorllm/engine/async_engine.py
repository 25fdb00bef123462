"""``AsyncEngine``: the engine embedded in the caller's async application (trio or asyncio).

    async with AsyncEngine.open("/path/to/model", max_num_seqs=64) as engine:
        async for out in engine.generate("Hello", SamplingParams(max_tokens=16)):
            print(out.outputs[0].text)

``open`` starts the actor tree (docs/architecture.md §2) in the caller's task: a root
ONE_FOR_ONE supervisor over output_processor, core (ONE_FOR_ALL: executor, scheduler),
input_processor and router, started in that order (sinks first) and stopped in reverse. The
model lives on one dedicated worker thread for the engine's whole life.

What blocks: ``generate``/``chat`` iterate until the request finishes; while the engine
sleeps, new requests wait (they are queued, and run after ``wake_up``). Cancelling the
iterating task, or closing the iterator early, aborts the request and frees its KV blocks.
When restart intensity is exceeded every open request fails with ``EngineDeadError`` and
the ``async with`` block raises it.
"""

from __future__ import annotations

import contextlib
import gc
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio

from actorllm.actors import (
    ActorRef,
    Backoff,
    ChildSpec,
    Reply,
    Restart,
    Strategy,
    Supervisor,
    SupervisorEscalation,
    open_supervisor,
)
from actorllm.core.engine_core_output import SchedulerStats
from actorllm.core.input_processor import InputProcessor, PromptType
from actorllm.core.outputs import RequestOutput
from actorllm.core.request_stats import RequestStats
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler import Scheduler
from actorllm.core.scheduler.kv_connector import KVConnectorBase
from actorllm.engine.actors.executor import ExecutorActor
from actorllm.engine.actors.input_processor import InputProcessorActor
from actorllm.engine.actors.output_processor import OutputProcessorActor
from actorllm.engine.actors.router import RouterActor
from actorllm.engine.actors.scheduler import SchedulerActor
from actorllm.engine.admission import Admission
from actorllm.engine.blame import Blame
from actorllm.engine.config import EngineConfig
from actorllm.engine.context import EngineContext
from actorllm.engine.dead_letters import DeadLetterPolicy
from actorllm.engine.errors import EngineClosedError, EngineDeadError, InvalidRequestError
from actorllm.engine.ledger import RequestLedger
from actorllm.engine.messages import (
    Abort,
    ChatOptions,
    CollectiveRPC,
    EngineRefs,
    Generate,
    GetStats,
    GrammarReady,
    IsKVConnectorEnabled,
    IsSleeping,
    ResetPrefixCache,
    SetKVConnector,
    Sleep,
    StartProfile,
    StopProfile,
    WakeUp,
)
from actorllm.engine.overload import check_waiting_bound
from actorllm.engine.request_fields import check_priority, monotonic_arrival
from actorllm.engine.startup import (
    RunnerFactory,
    build_runner,
    build_scheduler_config,
    build_tokenizer,
    default_runner_factory,
)
from actorllm.engine.stats import EngineStatistics, EngineStats
from actorllm.engine.structured_outputs import StructuredOutputs, structured_outputs_for
from actorllm.worker.worker import Worker
from actorllm.worker.worker_thread import WorkerThread

T = TypeVar("T")
M = TypeVar("M")

ACTORS = ("router", "input_processor", "scheduler", "executor", "output_processor")


def _as_config(
    model_or_config: str | Path | EngineConfig | None, kwargs: dict[str, Any]
) -> EngineConfig:
    if isinstance(model_or_config, EngineConfig):
        return model_or_config.replace(**kwargs) if kwargs else model_or_config
    model = None if model_or_config is None else str(model_or_config)
    return EngineConfig(model=model, **kwargs)


class AsyncEngine:
    """The engine's async API. Build it with :meth:`open`, never directly."""

    def __init__(
        self,
        ctx: EngineContext,
        *,
        thread: WorkerThread,
        worker: Worker,
        tokenizer: Any,
        inputs: InputProcessor,
        structured: StructuredOutputs | None = None,
    ) -> None:
        self._ctx = ctx
        self._thread = thread  # the one worker thread, for the engine's whole life
        self._worker = worker  # lives on that thread (the executor queues jobs for it)
        self._tokenizer = tokenizer
        self._inputs = inputs
        # Grammar compiler + cache for structured outputs: shared by the input processor and
        # every scheduler incarnation (engine/structured_outputs.py); None without a tokenizer.
        self._structured = structured
        # Per-request statistics (vLLM's request metrics): written by the output processor
        # (handed to it at start), read by get_stats().
        self._request_stats = RequestStats(ctx.model.max_model_len)
        self._supervisor: Supervisor | None = None
        self._dead: BaseException | None = None
        self._closing = False

    # -- lifecycle ------------------------------------------------------------------------

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        model_or_config: str | Path | EngineConfig | None = None,
        *,
        runner_factory: RunnerFactory | None = None,
        tokenizer: Any = None,
        connector_factory: Callable[[], KVConnectorBase] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[AsyncEngine]:
        """Start the engine; ``model_or_config`` is a model directory, an ``EngineConfig``
        or None (the demo model). Extra keyword arguments are ``EngineConfig`` fields.

        ``runner_factory`` (tests, benchmarks) replaces the model runner, e.g. with a
        ``ScriptedModel``; ``tokenizer`` an already loaded tokenizer; ``connector_factory``
        builds the scheduler-side KV connector of each new core.
        """
        config = _as_config(model_or_config, kwargs)
        thread = WorkerThread()
        thread.start()
        try:
            tok = await build_tokenizer(config, tokenizer)
            runner, info = await build_runner(
                config, thread, runner_factory or default_runner_factory
            )
            store = None
            if connector_factory is None and config.kv_connector == "offload":
                from actorllm.engine.kv_offload import make_offload_connector

                tier = make_offload_connector(config, int(runner.kv_cache_bytes_per_block()))
                connector_factory, store = tier.new_connector, tier.store
            worker = Worker(
                runner,
                thread.has_queued_jobs,
                offload_store=store,
                profiler_dir=config.profiler_dir,
                cuda=config.resolved_device() == "cuda",
            )
            sched_config = build_scheduler_config(config, info)
            make_connector = connector_factory
            refs = EngineRefs()
            structured = structured_outputs_for(config, tok, info) if tok is not None else None

            def wake_scheduler() -> None:  # on the loop, when a grammar finished compiling
                with contextlib.suppress(Exception):  # full mailbox: it pumps soon anyway
                    refs.scheduler.send_nowait(GrammarReady())

            def make_core() -> Scheduler:
                connector = make_connector() if make_connector is not None else None
                grammar = structured.tracker(wake_scheduler) if structured is not None else None
                return Scheduler(sched_config, kv_connector=connector, grammar=grammar)

            ledger, blame = RequestLedger(config.max_stream_backlog), Blame()
            admission = Admission(
                ledger,
                blame,
                make_core=make_core,
                max_inflight=2 if config.async_scheduling else 1,
                has_connector=make_connector is not None,
                kv_connector_enabled=config.kv_connector_enabled,
            )
            ctx = EngineContext(
                config=config,
                model=info,
                ledger=ledger,
                refs=refs,
                blame=blame,
                admission=admission,
            )
            inputs = InputProcessor(
                tok,
                vocab_size=info.vocab_size,
                max_model_len=info.max_model_len,
                eos_token_ids=info.eos_token_ids,
            )
            engine = cls(
                ctx, thread=thread, worker=worker, tokenizer=tok, inputs=inputs,
                structured=structured,
            )  # fmt: skip
            try:
                async with engine._run() as running:
                    yield running
            finally:
                if structured is not None:
                    structured.shutdown()
        finally:
            thread.stop(timeout=30.0)

    @asynccontextmanager
    async def _run(self) -> AsyncIterator[AsyncEngine]:
        ctx = self._ctx
        policy = DeadLetterPolicy(ctx)
        try:
            async with open_supervisor(
                strategy=Strategy.ONE_FOR_ONE,
                max_restarts=ctx.config.max_restarts,
                within=ctx.config.restart_window_s,
                name="engine",
                dead_letter=policy,
                backoff=self._backoff(),
            ) as sup:
                self._supervisor = sup
                await self._start_actors(sup)
                if ctx.config.freeze_gc_at_start:
                    gc.collect()
                    gc.freeze()
                try:
                    yield self
                finally:
                    self._closing = True
                    if ctx.config.freeze_gc_at_start:
                        # Give the frozen heap back to the collector: the engine's objects
                        # must be freed normally once it is gone (and at interpreter exit).
                        gc.unfreeze()
        except SupervisorEscalation as exc:
            self._die(exc)
            raise EngineDeadError(f"the engine died: {exc}") from exc
        finally:
            # Normal exit (or the caller's own error): whoever still waits is told why.
            if self._dead is None:
                self._closing = True
                ctx.ledger.fail_all(EngineClosedError("the engine was shut down"))

    async def _start_actors(self, sup: Supervisor) -> None:
        ctx, size, refs = self._ctx, self._ctx.config.mailbox_size, self._ctx.refs

        def spec(name: str, cls: Any, *extra: Any) -> ChildSpec[Any]:
            return ChildSpec(
                name,
                cls,
                args=(ctx, *extra),
                restart=Restart.PERMANENT,
                mailbox_size=size,
                shutdown_timeout=5.0,
                message_deadline=ctx.config.actor_message_deadline_s,
            )

        refs.output_processor = await sup.start_child(
            spec("output_processor", OutputProcessorActor, self._tokenizer, self._request_stats)
        )
        core = await sup.start_child(
            ChildSpec.supervisor(
                "core",
                strategy=Strategy.ONE_FOR_ALL,
                children=[
                    spec("executor", ExecutorActor, self._thread, self._worker),
                    spec("scheduler", SchedulerActor),
                ],
                max_restarts=ctx.config.max_restarts,
                within=ctx.config.restart_window_s,
                backoff=self._backoff(),
            )
        )
        refs.executor = core.ref("executor")
        refs.scheduler = core.ref("scheduler")
        refs.input_processor = await sup.start_child(
            spec("input_processor", InputProcessorActor, self._inputs, self._structured)
        )
        refs.router = await sup.start_child(spec("router", RouterActor))

    def _backoff(self) -> Backoff | None:
        initial = self._ctx.config.restart_backoff_s
        if initial <= 0:
            return None
        return Backoff(initial=initial, maximum=max(initial, 10 * initial))

    def _die(self, cause: BaseException) -> None:
        self._dead = cause
        self._ctx.ledger.fail_all(EngineDeadError(f"the engine died: {cause}"))

    # -- properties -----------------------------------------------------------------------

    @property
    def config(self) -> EngineConfig:
        return self._ctx.config

    @property
    def model_name(self) -> str:
        return self._ctx.config.model_name()

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def max_model_len(self) -> int:
        return self._ctx.model.max_model_len

    @property
    def vocab_size(self) -> int:
        return self._ctx.model.vocab_size

    @property
    def is_dead(self) -> bool:
        return self._dead is not None

    # -- requests -------------------------------------------------------------------------

    def generate(
        self,
        prompt: PromptType,
        sampling_params: SamplingParams | None = None,
        request_id: str | None = None,
        priority: int = 0,
        *,
        arrival_time: float | None = None,
    ) -> AsyncIterator[RequestOutput]:
        """Outputs of one request as it runs (see ``SamplingParams.output_kind``).

        ``priority`` (lower runs first) needs ``scheduling_policy="priority"`` unless it is
        0. ``arrival_time`` is when the request arrived, in ``time.time()`` seconds (vLLM's
        convention; default: now): it orders the waiting queue and starts the queue-time
        and latency metrics.

        Invalid input raises ``InvalidRequestError`` (a ``ValueError``) on the first
        iteration; a dead engine raises ``EngineDeadError``.
        """
        return self._request(
            prompt, sampling_params, request_id, priority, chat=None, arrival_time=arrival_time
        )

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        sampling_params: SamplingParams | None = None,
        request_id: str | None = None,
        priority: int = 0,
        *,
        add_generation_prompt: bool = True,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> AsyncIterator[RequestOutput]:
        """Like :meth:`generate`, for a conversation rendered with the chat template
        (``tools``: OpenAI function tools, handed to the template)."""
        options = ChatOptions(
            add_generation_prompt=add_generation_prompt,
            chat_template_kwargs=dict(chat_template_kwargs or {}),
            tools=[dict(t) for t in tools] if tools else None,
        )
        return self._request(
            list(messages), sampling_params, request_id, priority, chat=options, arrival_time=None
        )

    async def _request(
        self,
        prompt: Any,
        params: SamplingParams | None,
        request_id: str | None,
        priority: int,
        *,
        chat: ChatOptions | None,
        arrival_time: float | None,
    ) -> AsyncIterator[RequestOutput]:
        self._check_open()
        ctx = self._ctx
        check_priority(priority, ctx.config)
        check_waiting_bound(ctx.ledger, ctx.admission.core, ctx.config.max_waiting_requests)
        params = params or SamplingParams()
        rid = request_id or uuid.uuid4().hex
        now = monotonic_arrival(arrival_time)
        try:
            receive = self._ctx.ledger.open(rid, prompt, params, priority, now)
        except ValueError as exc:
            raise InvalidRequestError(str(exc), param="request_id") from exc
        finished = False
        try:
            async with receive:
                await self._ctx.refs.router.send(
                    Generate(
                        request_id=rid,
                        prompt=prompt,
                        params=params,
                        priority=priority,
                        arrival_time=now,
                        chat=chat,
                    )
                )
                async for item in receive:
                    if isinstance(item, BaseException):
                        finished = True
                        raise item
                    finished = item.finished
                    yield item
                    if finished:
                        return
            if self._dead is not None:
                raise EngineDeadError(f"the engine died: {self._dead}")
        finally:
            if not finished:
                await self._abort_quietly(rid)

    async def abort(self, request_id: str) -> None:
        """Abort a request; its caller's iterator ends. Unknown ids are ignored."""
        if request_id in self._ctx.ledger and not self.is_dead:
            await self._ctx.refs.router.send(Abort(request_id=request_id))

    async def _abort_quietly(self, request_id: str) -> None:
        if request_id not in self._ctx.ledger or self.is_dead:
            return
        with anyio.move_on_after(5.0, shield=True):
            try:
                await self._ctx.refs.router.send(Abort(request_id=request_id))
            except Exception:  # the engine is stopping: it fails what is left anyway
                self._ctx.ledger.close(request_id)

    async def drain(self, timeout_s: float | None = None) -> int:
        """Stop accepting requests, let open ones finish for up to ``timeout_s`` seconds
        (default ``EngineConfig.shutdown_timeout``), then abort the rest; returns how many
        were aborted.

        New ``generate``/``chat`` calls raise ``EngineClosedError`` from the moment this is
        called; aborted callers see their stream end with ``finish_reason="abort"``. Blocks
        until every request is closed (or the engine died). The engine keeps serving
        control calls until its ``async with`` block ends.
        """
        timeout = self._ctx.config.shutdown_timeout if timeout_s is None else timeout_s
        self._closing = True
        with anyio.move_on_after(timeout):
            await self._until_no_open_request()
        stragglers = [e.request_id for e in self._ctx.ledger]
        for rid in stragglers:
            await self.abort(rid)
        with anyio.move_on_after(max(5.0, timeout)):
            await self._until_no_open_request()
        return len(stragglers)

    async def _until_no_open_request(self) -> None:
        # Shutdown only: a 20 ms poll rather than an event on every ledger close.
        while len(self._ctx.ledger) and not self.is_dead:  # noqa: ASYNC110
            await anyio.sleep(0.02)

    def _check_open(self) -> None:
        if self._dead is not None:
            raise EngineDeadError(f"the engine died: {self._dead}")
        if self._closing:
            raise EngineClosedError("the engine is shutting down")

    # -- control plane --------------------------------------------------------------------

    async def _ask(
        self,
        ref: ActorRef[M],
        make: Callable[[Reply[T]], M],
        timeout: float | None = None,  # noqa: ASYNC109 - a documented per-call deadline
    ) -> T:
        """Ask the actor that owns the state a control call touches."""
        self._check_open()
        return await ref.ask(make, timeout=timeout)

    async def sleep(self, level: int = 1) -> None:
        """Free the KV cache (level 1: keep weights in host memory; level 2: drop them).
        Running requests are recomputed after ``wake_up``; new ones wait."""
        if level not in (1, 2):
            raise InvalidRequestError(f"sleep level must be 1 or 2, got {level}.", param="level")
        await self._ask(self._ctx.refs.scheduler, lambda r: Sleep(level=level, reply=r))

    async def wake_up(self) -> None:
        await self._ask(self._ctx.refs.scheduler, lambda r: WakeUp(reply=r))

    async def is_sleeping(self) -> bool:
        return await self._ask(self._ctx.refs.scheduler, lambda r: IsSleeping(reply=r))

    async def reset_prefix_cache(self) -> bool:
        """Drop every cached block; refused (False) while any block is in use."""
        return await self._ask(self._ctx.refs.scheduler, lambda r: ResetPrefixCache(reply=r))

    async def set_kv_connector_enabled(self, enabled: bool) -> None:
        await self._ask(
            self._ctx.refs.scheduler, lambda r: SetKVConnector(enabled=bool(enabled), reply=r)
        )

    async def is_kv_connector_enabled(self) -> bool:
        return await self._ask(self._ctx.refs.scheduler, lambda r: IsKVConnectorEnabled(reply=r))

    async def collective_rpc(
        self,
        method: str | Callable[..., Any],
        timeout: float | None = None,  # noqa: ASYNC109 - vLLM's signature
        args: tuple = (),
        kwargs: dict | None = None,
    ) -> list[Any]:
        """Run ``method`` on every worker (rank) between steps; one result per rank.

        ``method`` is the name of a :class:`~actorllm.worker.worker.Worker` method
        (``"load_weights"``, ``"get_model"``, ...) or a callable called as
        ``method(worker, *args, **kwargs)``; it runs on the worker thread, after the steps
        already launched and before the next one. ``timeout`` (seconds) raises
        ``TimeoutError``: the engine stays healthy, and the method still runs to its end on
        the worker thread (its result is dropped). An exception raised by the method is
        raised here; no actor crashes. After changing weights, call
        :meth:`reset_prefix_cache`: cached prefixes hold KV computed with the old weights.
        """
        if not (callable(method) or isinstance(method, str)):
            raise InvalidRequestError(
                "method must be a worker method name or a callable.", param="method"
            )
        return await self._ask(
            self._ctx.refs.executor,
            lambda r: CollectiveRPC(
                method=method, args=tuple(args), kwargs=dict(kwargs or {}), reply=r
            ),
            timeout=timeout,
        )

    async def start_profile(self) -> None:
        """Start the torch profiler (CPU, and CUDA on a GPU) over the worker thread and the
        event loop. Raises ``ProfilerError`` when ``EngineConfig.profiler_dir`` is None or a
        profile is already running."""
        await self._ask(self._ctx.refs.executor, lambda r: StartProfile(reply=r))

    async def stop_profile(self) -> None:
        """Stop the profiler and write its Chrome trace under ``profiler_dir``. Raises
        ``ProfilerError`` when no profile is running."""
        await self._ask(self._ctx.refs.executor, lambda r: StopProfile(reply=r))

    async def get_stats(self) -> EngineStats:
        sched: SchedulerStats = await self._ask(
            self._ctx.refs.scheduler, lambda r: GetStats(reply=r)
        )
        adm = self._ctx.admission
        return EngineStats(
            num_running_reqs=sched.num_running_reqs,
            num_waiting_reqs=sched.num_waiting_reqs,
            kv_cache_usage=sched.kv_cache_usage,
            prefix_cache_queries=sched.prefix_cache_queries,
            prefix_cache_hits=sched.prefix_cache_hits,
            connector_queries=sched.connector_queries,
            connector_hits=sched.connector_hits,
            num_preemptions=sched.num_preemptions,
            num_open_requests=len(self._ctx.ledger),
            steps_done=adm.steps_done,
            iteration_tokens=list(adm.iteration_tokens),
            is_sleeping=adm.sleep_level > 0,
            kv_connector_enabled=adm.kv_connector_enabled,
            actor_restarts=self._actor_stat("restarts"),
            mailbox_depth=self._actor_stat("depth"),
            num_gpu_blocks=self._ctx.model.num_blocks - 1,  # the null block holds no KV
            requests=self._request_stats.snapshot(),
        )

    def _actor_stat(self, key: str) -> dict[str, int]:
        """{actor: restarts} (key "restarts") or {actor: queued messages} (key "depth")."""
        started = self._ctx.refs.started()
        out: dict[str, int] = {}
        for name in ACTORS:
            ref = started.get(name)
            if ref is None:
                out[name] = 0
                continue
            stats = ref.statistics()
            out[name] = int(stats.mailbox.depth if key == "depth" else stats.restarts)
        return out

    def statistics(self) -> EngineStatistics:
        """Internal state for debugging: ledger, blame, worker thread, each actor (with its
        own report: the scheduler's steps in flight, probation and sleep state...), and the
        supervisor tree."""
        return EngineStatistics(
            ledger=self._ctx.ledger.statistics(),
            blame=self._ctx.blame.statistics(),
            worker_thread=self._thread.statistics(),
            actors={name: ref.statistics() for name, ref in self._ctx.refs.started().items()},
            supervisor=self._supervisor.statistics() if self._supervisor is not None else None,
        )
