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

import gc
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from actorllm.actors import (
    Backoff,
    ChildSpec,
    Restart,
    Strategy,
    SupervisorEscalation,
    open_supervisor,
)
from actorllm.core.outputs import RequestOutput
from actorllm.core.request_stats import RequestStats
from actorllm.core.sampling_params import SamplingParams
from actorllm.engine.actors.executor import ExecutorActor
from actorllm.engine.actors.input_processor import InputProcessorActor
from actorllm.engine.actors.output_processor import OutputProcessorActor
from actorllm.engine.actors.router import RouterActor
from actorllm.engine.actors.scheduler import SchedulerActor
from actorllm.engine.config import EngineConfig
from actorllm.engine.context import EngineContext
from actorllm.engine.dead_letters import DeadLetterPolicy
from actorllm.engine.errors import EngineClosedError, EngineDeadError, InvalidRequestError
from actorllm.engine.input_processing import InputProcessing, PromptType
from actorllm.engine.ledger import RequestLedger
from actorllm.engine.messages import Abort, Control, ControlOp, Generate
from actorllm.engine.startup import (
    RunnerFactory,
    build_runner,
    build_tokenizer,
    default_runner_factory,
)
from actorllm.engine.stats import EngineStats
from actorllm.worker.step_pipeline import StepPipeline
from actorllm.worker.worker_thread import WorkerThread

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

    def __init__(self, ctx: EngineContext) -> None:
        self._ctx = ctx
        self._supervisor: Any = None
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
        connector_factory: Any = None,
        **kwargs: Any,
    ) -> AsyncIterator[AsyncEngine]:
        """Start the engine; ``model_or_config`` is a model directory, an ``EngineConfig``
        or None (the demo model). Extra keyword arguments are ``EngineConfig`` fields.

        ``runner_factory`` (tests, benchmarks) replaces the model runner, e.g. with a
        ``ScriptedModel``; ``tokenizer`` an already loaded tokenizer.
        """
        config = _as_config(model_or_config, kwargs)
        worker = WorkerThread()
        worker.start()
        try:
            tok = await build_tokenizer(config, tokenizer)
            runner, info = await build_runner(
                config, worker, runner_factory or default_runner_factory
            )
            ctx = EngineContext(
                config=config,
                ledger=RequestLedger(),
                worker=worker,
                runner=runner,
                model=info,
                inputs=InputProcessing(
                    tok,
                    vocab_size=info.vocab_size,
                    max_model_len=info.max_model_len,
                    eos_token_ids=info.eos_token_ids,
                ),
                tokenizer=tok,
                connector_factory=connector_factory,
                kv_connector_enabled=config.kv_connector_enabled,
                request_stats=RequestStats(info.max_model_len),
            )
            if connector_factory is None and config.kv_connector == "offload":
                from actorllm.engine.kv_offload import make_offload_connector

                ctx.connector_factory = make_offload_connector(ctx)
            ctx.pipeline = StepPipeline(runner, worker.has_queued_jobs)
            engine = cls(ctx)
            async with engine._run() as running:
                yield running
        finally:
            worker.stop(timeout=30.0)

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
                await self._start_actors(sup, policy)
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

    async def _start_actors(self, sup: Any, policy: DeadLetterPolicy) -> None:
        ctx, size = self._ctx, self._ctx.config.mailbox_size

        def spec(name: str, cls: Any) -> ChildSpec[Any]:
            return ChildSpec(
                name,
                cls,
                args=(ctx,),
                restart=Restart.PERMANENT,
                mailbox_size=size,
                shutdown_timeout=5.0,
            )

        ctx.refs["output_processor"] = await sup.start_child(
            spec("output_processor", OutputProcessorActor)
        )
        core = await sup.start_child(
            ChildSpec.supervisor(
                "core",
                strategy=Strategy.ONE_FOR_ALL,
                children=[spec("executor", ExecutorActor), spec("scheduler", SchedulerActor)],
                max_restarts=ctx.config.max_restarts,
                within=ctx.config.restart_window_s,
                backoff=self._backoff(),
            )
        )
        ctx.refs["executor"] = core.ref("executor")
        ctx.refs["scheduler"] = core.ref("scheduler")
        ctx.refs["input_processor"] = await sup.start_child(
            spec("input_processor", InputProcessorActor)
        )
        ctx.refs["router"] = await sup.start_child(spec("router", RouterActor))

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
        return self._ctx.tokenizer

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
    ) -> AsyncIterator[RequestOutput]:
        """Outputs of one request as it runs (see ``SamplingParams.output_kind``).

        Invalid input raises ``InvalidRequestError`` (a ``ValueError``) on the first
        iteration; a dead engine raises ``EngineDeadError``.
        """
        return self._request(
            prompt, sampling_params, request_id, priority, is_chat=False, chat_options=None
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
    ) -> AsyncIterator[RequestOutput]:
        """Like :meth:`generate`, for a conversation rendered with the chat template."""
        options = {
            "add_generation_prompt": add_generation_prompt,
            "chat_template_kwargs": dict(chat_template_kwargs or {}),
        }
        return self._request(
            list(messages),
            sampling_params,
            request_id,
            priority,
            is_chat=True,
            chat_options=options,
        )

    async def _request(
        self,
        prompt: Any,
        params: SamplingParams | None,
        request_id: str | None,
        priority: int,
        *,
        is_chat: bool,
        chat_options: dict[str, Any] | None,
    ) -> AsyncIterator[RequestOutput]:
        self._check_open()
        params = params or SamplingParams()
        rid = request_id or uuid.uuid4().hex
        try:
            receive = self._ctx.ledger.open(rid, prompt, params, priority, time.monotonic())
        except ValueError as exc:
            raise InvalidRequestError(str(exc), param="request_id") from exc
        finished = False
        try:
            async with receive:
                await self._ctx.refs["router"].send(
                    Generate(request_id=rid, is_chat=is_chat, chat_options=chat_options)
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
            await self._ctx.refs["router"].send(Abort(request_id=request_id))

    async def _abort_quietly(self, request_id: str) -> None:
        if request_id not in self._ctx.ledger or self.is_dead:
            return
        with anyio.move_on_after(5.0, shield=True):
            try:
                await self._ctx.refs["router"].send(Abort(request_id=request_id))
            except Exception:  # the engine is stopping: it fails what is left anyway
                self._ctx.ledger.close(request_id)

    def _check_open(self) -> None:
        if self._dead is not None:
            raise EngineDeadError(f"the engine died: {self._dead}")
        if self._closing:
            raise EngineClosedError("the engine is shutting down")

    # -- control plane --------------------------------------------------------------------

    async def _control(self, op: ControlOp, arg: Any = None) -> Any:
        self._check_open()
        return await self._ctx.refs["router"].ask(
            lambda r: Control(op=op, arg=arg, reply=r), timeout=None
        )

    async def sleep(self, level: int = 1) -> None:
        """Free the KV cache (level 1: keep weights in host memory; level 2: drop them).
        Running requests are recomputed after ``wake_up``; new ones wait."""
        if level not in (1, 2):
            raise InvalidRequestError(f"sleep level must be 1 or 2, got {level}.", param="level")
        await self._control(ControlOp.SLEEP, level)

    async def wake_up(self) -> None:
        await self._control(ControlOp.WAKE_UP)

    async def is_sleeping(self) -> bool:
        return bool(await self._control(ControlOp.IS_SLEEPING))

    async def reset_prefix_cache(self) -> bool:
        """Drop every cached block; refused (False) while any block is in use."""
        return bool(await self._control(ControlOp.RESET_PREFIX_CACHE))

    async def set_kv_connector_enabled(self, enabled: bool) -> None:
        await self._control(ControlOp.SET_KV_CONNECTOR, bool(enabled))

    async def is_kv_connector_enabled(self) -> bool:
        return bool(await self._control(ControlOp.IS_KV_CONNECTOR_ENABLED))

    async def get_stats(self) -> EngineStats:
        sched = await self._control(ControlOp.GET_STATS)
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
            steps_done=self._ctx.steps_done,
            iteration_tokens=list(self._ctx.iteration_tokens),
            is_sleeping=self._ctx.sleeping > 0,
            kv_connector_enabled=self._ctx.kv_connector_enabled
            and self._ctx.connector_factory is not None,
            actor_restarts=self._actor_stat("restarts"),
            mailbox_depth=self._actor_stat("depth"),
            num_gpu_blocks=self._ctx.model.num_blocks - 1,  # the null block holds no KV
            requests=stats.snapshot() if (stats := self._ctx.request_stats) else None,
        )

    def _actor_stat(self, key: str) -> dict[str, int]:
        """{actor: restarts} (key "restarts") or {actor: queued messages} (key "depth")."""
        out: dict[str, int] = {}
        for name in ACTORS:
            ref = self._ctx.refs.get(name)
            if ref is None:
                out[name] = 0
                continue
            stats = ref.statistics()
            out[name] = int(stats.mailbox.depth if key == "depth" else getattr(stats, key))
        return out

    def statistics(self) -> dict[str, Any]:
        """Internal state for debugging: ledger, worker thread, supervisor."""
        return {
            "ledger": self._ctx.ledger.statistics(),
            "worker": self._ctx.worker.statistics(),
            "core_epoch": self._ctx.core_epoch,
            "supervisor": self._supervisor.statistics() if self._supervisor is not None else None,
        }
