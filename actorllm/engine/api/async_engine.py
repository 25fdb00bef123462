"""``AsyncEngine``: the engine embedded in the caller's async application (trio or asyncio).

    async with AsyncEngine.open("/path/to/model", max_num_seqs=64) as engine:
        async for out in engine.generate("Hello", SamplingParams(max_tokens=16)):
            print(out.outputs[0].text)

``open`` builds the engine (engine/actors/assembly.py: one tokenizer, and per data-parallel
replica a worker thread with its own model and KV cache) and starts the actor tree in the
caller's task: a root ONE_FOR_ONE supervisor over output_processor, one core subtree per
replica (ONE_FOR_ALL: executor, scheduler), input_processor and router, started in that
order (sinks first) and stopped in reverse. The requests API is engine/api/request_api.py, the
control plane engine/api/control_plane.py.

What blocks: ``generate``/``chat`` iterate until the request finishes; while the engine
sleeps, new requests wait (they are queued, and run after ``wake_up``). When restart
intensity is exceeded (with several replicas: when the last replica gave up) every open
request fails with ``EngineDeadError`` and the ``async with`` block raises it.
"""

from __future__ import annotations

import functools
import logging
import os
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from actorllm.actors import Strategy, SupervisorEscalation, open_supervisor
from actorllm.core.beam_search import BeamSearchParams
from actorllm.core.outputs import RequestOutput
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler.kv_connector import KVConnectorBase
from actorllm.core.watermarking import resolve_beam_search
from actorllm.engine.actors.assembly import EngineParts, backoff_of, build_engine, start_actors
from actorllm.engine.actors.startup import RunnerFactory, default_runner_factory
from actorllm.engine.api.beam_search import beam_search
from actorllm.engine.api.control_plane import ACTORS, ControlPlane
from actorllm.engine.api.engine_status import EngineStatus
from actorllm.engine.api.lora_api import LoRAAdapters
from actorllm.engine.api.request_api import RequestAPI
from actorllm.engine.api.weight_sync_api import WeightSync
from actorllm.engine.config.engine_config import EngineConfig
from actorllm.engine.config.environment import check_environment
from actorllm.engine.config.generation_config import default_sampling_params
from actorllm.engine.config.interpreter_settings import engine_interpreter_settings
from actorllm.engine.config.model_config import ModelConfig
from actorllm.engine.config.structured_outputs_config import structured_outputs_config_kwargs
from actorllm.engine.errors import EngineClosedError, EngineDeadError
from actorllm.engine.recovery.dead_letters import DeadLetterPolicy
from actorllm.worker.omp_spin import release_thread_team
from actorllm.worker.worker_thread import WorkerThread

if TYPE_CHECKING:  # the delegating methods' signatures
    from actorllm.engine.actors.assembly import Replica
    from actorllm.engine.config.pooling_model import PoolingModel

__all__ = ["ACTORS", "AsyncEngine"]

logger = logging.getLogger("actorllm.engine")


def _as_config(
    model_or_config: str | Path | EngineConfig | None, kwargs: dict[str, Any]
) -> EngineConfig:
    """``open``'s arguments as one ``EngineConfig``: ``EngineConfig`` fields, plus the
    nested ``structured_outputs_config`` (whose flat fields win over it). With an
    ``EngineConfig``, the keywords replace its fields. Any other name raises ``TypeError``."""
    unknown = sorted(k for k in kwargs if k not in _OPEN_NAMES)
    if unknown:
        raise TypeError(
            f"AsyncEngine.open: {unknown[0]!r} is not an EngineConfig field. vLLM's "
            "engine-argument spellings go through actorllm.compat.vllm: LLM(...), "
            "AsyncLLM.from_engine_args(...), or actorllm.compat.vllm.args.engine_config(...) "
            "to build the EngineConfig to pass here."
        )
    kwargs = dict(kwargs)
    nested = kwargs.pop("structured_outputs_config", None)
    if nested is not None:
        kwargs = structured_outputs_config_kwargs(nested) | kwargs
    if isinstance(model_or_config, EngineConfig):
        return model_or_config.replace(**kwargs) if kwargs else model_or_config
    model = None if model_or_config is None else str(model_or_config)
    return EngineConfig(model=model, **kwargs)


_OPEN_NAMES = frozenset({*EngineConfig.__struct_fields__, "structured_outputs_config"})


P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C")


def _forward(
    component: str, method: Callable[Concatenate[C, P], R]
) -> Callable[Concatenate[Any, P], R]:
    """``method`` of the component held in attribute ``component``, as a method of the
    engine: same signature (mypy checks calls against it), name and docstring."""
    name = method.__name__

    def call(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return getattr(getattr(self, component), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = method.__doc__
    call.__wrapped__ = method  # type: ignore[attr-defined]  # inspect.signature follows it
    return call


class AsyncEngine:
    """The engine's async API. Build it with :meth:`open`, never directly.

    Two components do the work, each handed what it needs here: the request side
    (:class:`RequestAPI`: ``generate``, ``chat``, ``abort``, ``drain``) and the control
    plane (:class:`ControlPlane`: sleep, prefix cache, KV connector, RPC, profiling,
    statistics). The one piece of state they share is the :class:`EngineStatus`
    (dead, closing), which this class writes while the engine runs.
    """

    def __init__(
        self, parts: EngineParts, sampling_defaults: dict[str, float] | None = None
    ) -> None:
        self._parts = parts
        # Requests' default sampling fields (generation_config): what generate/chat use
        # when given no sampling_params, and what the server fills in.
        self._sampling_defaults = dict(sampling_defaults or {})
        self._ctx = parts.ctx  # the first replica's context: the shared ledger and refs
        # The first replica's worker thread, for its whole life (tests inspect it).
        self._thread = parts.replicas[0].thread
        self._tokenizer = parts.tokenizer
        # Grammar compiler + cache for structured outputs: shared by the input processor
        # and every scheduler incarnation (engine/scheduling/structured_outputs.py); None
        # without a tokenizer.
        self._structured = parts.structured
        # Per-request statistics (vLLM's request metrics) live in parts.request_stats:
        # written by the output processor, read by the control plane's get_stats().
        self._status = EngineStatus()
        self._control = ControlPlane(parts, self._status)
        self._loras = LoRAAdapters(parts.ctx.config, self._control, parts.ctx.loras)
        self._weights = WeightSync(parts, self._status)
        self._requests = RequestAPI(
            parts, self._status, self.get_default_sampling_params, self._loras
        )

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
        ``ScriptedModel``; it is called once per data-parallel replica. ``tokenizer`` is an
        already loaded tokenizer, or (a string or path, vLLM's meaning) the name or
        directory to load it from: ``EngineConfig.tokenizer``. ``connector_factory`` builds
        the scheduler-side KV connector of each new core.
        """
        check_environment()
        if isinstance(tokenizer, str | os.PathLike):
            kwargs = {**kwargs, "tokenizer": os.fspath(tokenizer)}
            tokenizer = None
        config = _as_config(model_or_config, kwargs)
        sampling_defaults = config.get_diff_sampling_param()  # a bad file fails before loading
        if config.releases_host_openmp_team():
            # The host's earlier torch work on this thread left an idle OpenMP team that
            # would put the worker's team in libgomp's short-spin regime (omp_spin.py).
            release_thread_team()
        if sampling_defaults:
            logger.info("default sampling parameters (a request's own win): %s", sampling_defaults)
        threads: list[WorkerThread] = []
        try:
            for _ in range(config.data_parallel_size):
                threads.append(WorkerThread())
                threads[-1].start()
            parts = await build_engine(
                config,
                threads,
                runner_factory or default_runner_factory,
                tokenizer,
                connector_factory,
            )
            engine = cls(parts, sampling_defaults)
            try:
                async with engine._run() as running:
                    yield running
            finally:
                if parts.structured is not None:
                    parts.structured.shutdown()
                for replica in parts.replicas:  # after the steps queued before it
                    replica.thread.submit(replica.worker.shutdown)  # tensor parallel: ranks
        finally:
            for thread in threads:
                thread.stop(timeout=30.0)

    @asynccontextmanager
    async def _run(self) -> AsyncIterator[AsyncEngine]:
        ctx = self._ctx
        try:
            async with open_supervisor(
                strategy=Strategy.ONE_FOR_ONE,
                max_restarts=ctx.config.max_restarts,
                within=ctx.config.restart_window_s,
                name="engine",
                dead_letter=DeadLetterPolicy(ctx),
                backoff=backoff_of(ctx.config),
            ) as sup:
                self._status.supervisor = sup
                await start_actors(sup, self._parts)
                with engine_interpreter_settings(
                    freeze=ctx.config.freeze_gc_at_start,
                    gen0_threshold=ctx.config.gc_gen0_threshold,
                    switch_interval_s=ctx.config.switch_interval_s,
                ):
                    try:
                        yield self
                    finally:
                        self._status.close()
        except SupervisorEscalation as exc:
            self._die(exc)
            raise EngineDeadError(f"the engine died: {exc}") from exc
        finally:
            # Normal exit (or the caller's own error): whoever still waits is told why.
            if self._status.dead is None:
                self._status.close()
                ctx.ledger.fail_all(EngineClosedError("the engine was shut down"))

    def _die(self, cause: BaseException) -> None:
        self._status.die(cause)
        self._ctx.ledger.fail_all(EngineDeadError(f"the engine died: {cause}"))

    # -- properties -----------------------------------------------------------------------

    @property
    def config(self) -> EngineConfig:
        return self._ctx.config

    @property
    def model_name(self) -> str:
        return self._ctx.config.model_name()

    @property
    def model_names(self) -> list[str]:
        """Every name requests may use (``served_model_name``'s aliases; the first is
        :attr:`model_name`)."""
        return self._ctx.config.model_names()

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    def get_default_sampling_params(self) -> SamplingParams:
        """What ``generate``/``chat`` use without ``sampling_params``: ``SamplingParams``
        with the model's generation_config defaults (``generation_config``,
        ``override_generation_config``) on top, as vLLM's ``LLM``."""
        return default_sampling_params(self._sampling_defaults)

    @property
    def max_model_len(self) -> int:
        return self._ctx.model.max_model_len

    @property
    def vocab_size(self) -> int:
        return self._ctx.model.vocab_size

    @functools.cached_property
    def model_config(self) -> ModelConfig:
        """vLLM's ``ModelConfig`` view of the model (built once: it reads the checkpoint's
        config and, for GPTQ, its tensor headers; nothing in it changes while the engine
        runs)."""
        return ModelConfig.of(self.config, max_model_len=self.max_model_len,
                              vocab_size=self.vocab_size)  # fmt: skip

    @property
    def prompt_embeds_spec(self) -> tuple[int, Any] | None:
        """(hidden size, dtype) of the embedding prompts it takes; None: it takes none
        (``enable_prompt_embeds`` off)."""
        return self._ctx.model.prompt_embeds

    @property
    def pooling_model(self) -> PoolingModel | None:
        """What the pooling model offers (tasks, pooling, sizes); None: text generation."""
        return self._ctx.model.pooling

    @property
    def data_parallel_size(self) -> int:
        return len(self._parts.replicas)

    # -- requests (RequestAPI) and control (ControlPlane): the components' own methods,
    # signatures and docstrings, reached through this engine ----------------------------

    @property
    def is_dead(self) -> bool:
        return self._status.is_dead

    generate = _forward("_requests", RequestAPI.generate)
    chat = _forward("_requests", RequestAPI.chat)
    encode = _forward("_requests", RequestAPI.encode)
    abort = _forward("_requests", RequestAPI.abort)
    abort_all = _forward("_requests", RequestAPI.abort_all)
    drain = _forward("_requests", RequestAPI.drain)
    check_admission = _forward("_requests", RequestAPI.check_admission)
    get_num_queued_tokens = _forward("_requests", RequestAPI.get_num_queued_tokens)

    def beam_search(
        self,
        prompt: Any,
        params: BeamSearchParams,
        request_id: str | None = None,
        *,
        lora_request: Any = None,
        priority: int = 0,
        logprobs: int | None = None,
    ) -> AsyncIterator[RequestOutput]:
        """Beam search for one prompt (vLLM's online beam search): yields one finished
        ``RequestOutput`` holding the best ``params.beam_width`` beams, best first. Each
        step's beams run as ordinary one-token requests (see
        :mod:`actorllm.engine.api.beam_search`)."""
        resolve_beam_search(self.config.watermarking(), params.watermarking)  # vLLM's warning
        return beam_search(
            self.generate, self.tokenizer, prompt, params, request_id or uuid.uuid4().hex,
            lora_request=lora_request, priority=priority, logprobs=logprobs,
        )  # fmt: skip

    sleep = _forward("_control", ControlPlane.sleep)
    wake_up = _forward("_control", ControlPlane.wake_up)
    is_sleeping = _forward("_control", ControlPlane.is_sleeping)
    release_kv_cache_memory = _forward("_control", ControlPlane.release_kv_cache_memory)
    pause_generation = _forward("_control", ControlPlane.pause_generation)
    resume_generation = _forward("_control", ControlPlane.resume_generation)
    is_paused = _forward("_control", ControlPlane.is_paused)
    reset_prefix_cache = _forward("_control", ControlPlane.reset_prefix_cache)
    set_kv_connector_enabled = _forward("_control", ControlPlane.set_kv_connector_enabled)
    is_kv_connector_enabled = _forward("_control", ControlPlane.is_kv_connector_enabled)
    collective_rpc = _forward("_control", ControlPlane.collective_rpc)
    compute_weight_checksums = _forward("_control", ControlPlane.compute_weight_checksums)
    start_profile = _forward("_control", ControlPlane.start_profile)
    stop_profile = _forward("_control", ControlPlane.stop_profile)
    get_stats = _forward("_control", ControlPlane.get_stats)
    add_lora = _forward("_loras", LoRAAdapters.add_lora)
    remove_lora = _forward("_loras", LoRAAdapters.remove_lora)
    list_loras = _forward("_loras", LoRAAdapters.list_loras)
    pin_lora = _forward("_loras", LoRAAdapters.pin_lora)
    check_lora_request = _forward("_loras", LoRAAdapters.check)
    statistics = _forward("_control", ControlPlane.statistics)
    init_weight_transfer_engine = _forward("_weights", WeightSync.init_weight_transfer_engine)
    shutdown_weight_transfer_engine = _forward(
        "_weights", WeightSync.shutdown_weight_transfer_engine
    )
    start_weight_update = _forward("_weights", WeightSync.start_weight_update)
    update_weights = _forward("_weights", WeightSync.update_weights)
    finish_weight_update = _forward("_weights", WeightSync.finish_weight_update)
    update_weight_version = _forward("_weights", WeightSync.update_weight_version)
    get_weight_version = _forward("_weights", WeightSync.get_weight_version)
    get_world_size = _forward("_weights", WeightSync.get_world_size)

    # The test harness (actorllm.testing) inspects these.
    def _live(self) -> list[Replica]:
        return self._control.live()

    def _actor_stat(self, key: str) -> dict[str, int]:
        return self._control.actor_stat(key)
