"""What ``LLM`` and ``LLMEngine`` share: a :class:`Bridge` to the engine, and the control
plane as blocking calls.

Closing is optional: ``close()``, ``with``, ``del`` and the end of the script all stop the
engine and its threads (see :mod:`actorllm.compat.vllm.engine_thread`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, Self

from actorllm.compat.vllm.bridge import Bridge
from actorllm.compat.vllm.not_built import check_options
from actorllm.compat.vllm.weight_transfer import unwrap
from actorllm.core.errors import InvalidRequestError
from actorllm.core.lora import LoRARequest
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.seeds import mix_seed
from actorllm.engine.api.async_engine import AsyncEngine
from actorllm.engine.api.stats import EngineStats
from actorllm.engine.config.engine_config import EngineConfig
from actorllm.engine.metrics.prometheus import ServerMetrics
from actorllm.engine.metrics.snapshot import Metric, snapshot
from actorllm.engine.recovery.pause import PauseMode

logger = logging.getLogger("actorllm.engine")


class SyncFacade:
    """An engine driven from synchronous code. ``model`` is a model directory, an
    ``EngineConfig`` or None (the demo model); keyword arguments are ``EngineConfig``
    fields or vLLM's other engine arguments (:mod:`actorllm.compat.vllm.args`);
    ``backend`` is the event loop the engine runs on ("trio" or "asyncio").

    ``disable_log_stats=False`` logs a line of the engine's state every 10 s, as vLLM's
    ``LLM`` / ``LLMEngine`` do with it (vLLM's ``LLM`` defaults it to True: no line)."""

    def __init__(
        self,
        model: str | Path | EngineConfig | None = None,
        *,
        backend: str = "trio",
        disable_log_stats: bool = True,
        **config: Any,
    ) -> None:
        name = f"actorllm-{type(self).__name__.lower()}"
        self._bridge = Bridge(
            model, config, backend=backend, name=name, log_stats=not disable_log_stats
        )
        self._thread = self._bridge.thread
        self.engine: AsyncEngine = self._bridge.engine
        self._offline_requests = 0  # requests given a seed by with_offline_seed
        self._metrics: ServerMetrics | None = None  # get_metrics's, made at its first call

    @classmethod
    def _sharing(cls, other: SyncFacade) -> Self:
        """A facade of this class on ``other``'s engine (``__init__``'s state, no engine
        started): vLLM's ``LLM.llm_engine``."""
        facade = cls.__new__(cls)
        facade._bridge, facade._thread, facade.engine = other._bridge, other._thread, other.engine
        facade._offline_requests, facade._metrics = 0, None
        return facade

    def with_offline_seed(self, params: SamplingParams) -> SamplingParams:
        """``params`` with a seed if it samples without one: a mix of the engine's ``seed``
        and this request's number among this object's requests. So a script's results
        repeat run after run, as vLLM's offline ones do with ``seed`` (its engine steps
        after all of ``generate``'s requests are in; here requests reach the loop as they
        are ready, so the batch a row is drawn in varies)."""
        self._offline_requests += 1
        if params.seed is not None or params.temperature == 0.0:
            return params
        # An unsigned 64-bit seed: SamplingParams takes [-2^63, 2^64) as vLLM's does.
        return params.clone(seed=mix_seed(self.engine.config.seed, self._offline_requests))

    # -- control plane --------------------------------------------------------------------

    def sleep(self, level: int = 1, mode: PauseMode = "abort") -> None:
        """Free the KV cache (level 2: the weights too) until :meth:`wake_up`; level 0
        only stops scheduling (requests are still taken); ``mode`` (vLLM's, default abort)
        says what happens to requests in flight (``AsyncEngine.sleep``)."""
        self._thread.call(self.engine.sleep, level, mode)

    def wake_up(self, tags: list[str] | None = None) -> bool:
        """Restore ``tags`` (``["weights"]``, ``["kv_cache"]``, ``["scheduling"]``; None:
        everything); returns whether the engine is fully awake (it generates again only
        then)."""
        return bool(self._thread.call(self.engine.wake_up, tags))

    def release_kv_cache_memory(self) -> None:
        """vLLM's: free the KV cache alone, after a completed ``sleep(level=0)``; restore it
        with ``wake_up(tags=["kv_cache"])`` (``AsyncEngine.release_kv_cache_memory``)."""
        self._thread.call(self.engine.release_kv_cache_memory)

    def is_sleeping(self) -> bool:
        return self._thread.call(self.engine.is_sleeping)

    def reset_prefix_cache(
        self, reset_running_requests: bool = False, reset_connector: bool = False
    ) -> bool:
        """Drop every cached block; False (nothing done) while any block is in use. vLLM's
        options are refused when on (``AsyncEngine.reset_prefix_cache``)."""
        call = partial(
            self.engine.reset_prefix_cache,
            reset_running_requests=reset_running_requests,
            reset_connector=reset_connector,
        )
        return self._thread.call(call)

    def reset_mm_cache(self) -> None:
        """vLLM's: clear the multimodal processor and encoder caches. The models served
        here take no multimodal inputs, so those caches do not exist and there is nothing
        to clear (RL loops call it beside ``reset_prefix_cache``; it returns at once)."""

    def reset_encoder_cache(self) -> None:
        """vLLM's ``LLMEngine.reset_encoder_cache``: as :meth:`reset_mm_cache`, nothing
        to clear."""

    def get_stats(self) -> EngineStats:
        """The engine's statistics: scheduler state, and in ``requests`` the per-request
        metrics (latencies, token counts, finish reasons) of everything run so far."""
        return self._thread.call(self.engine.get_stats)

    def get_metrics(self) -> list[Metric]:
        """vLLM's snapshot of the Prometheus metrics (``vllm.v1.metrics.reader``'s
        ``Counter``, ``Gauge``, ``Histogram``, ``Vector``): the server's ``/metrics``
        under its default ``actorllm:`` prefix, from the engine's statistics now. vLLM
        asks for ``disable_log_stats=False`` first; the statistics are kept either way
        here. Counters stay monotonic across engine restarts, as on ``/metrics``."""
        if self._metrics is None:
            engine = self.engine
            self._metrics = ServerMetrics(
                engine.model_name, cache_config=engine.config, max_model_len=engine.max_model_len
            )
        self._metrics.update_from_stats(self.get_stats())
        return snapshot(self._metrics)

    def collective_rpc(
        self,
        method: str | Callable[..., Any],
        timeout: float | None = None,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> list[Any]:
        """Run ``method`` on every worker between steps; one result per worker (rank).

        ``method`` names a worker method (``"load_weights"``, ``"get_model"``, ...) or is a
        callable called as ``method(worker, *args, **kwargs)`` on the worker thread. An
        exception it raises is raised here; ``timeout`` (seconds) raises ``TimeoutError``.
        Either way the engine goes on. See ``AsyncEngine.collective_rpc``.
        """
        call = partial(
            self.engine.collective_rpc,
            method,
            timeout=timeout,
            args=tuple(args),
            kwargs=dict(kwargs or {}),
        )
        return self._thread.call(call)

    def apply_model(self, func: Callable[[Any], Any]) -> list[Any]:
        """vLLM's ``apply_model``: ``func(model)`` on every worker's model (the
        ``torch.nn.Module``, None while asleep at level 2), one result per worker, between
        steps; ``collective_rpc``'s rules for errors. Return small values: each result
        crosses from the worker (a process, for a remote rank)."""
        return self.collective_rpc(_ApplyModel(func))

    # -- weight transfer from a trainer (vLLM's RL methods; docs/rlhf.md) ------------------

    def init_weight_transfer_engine(self, request: Any) -> None:
        """Join the trainer's transfer group: ``{"init_info": {...}}`` or a
        ``WeightTransferInitRequest`` (blocks until the trainer and every rank joined)."""
        self._thread.call(self.engine.init_weight_transfer_engine, unwrap(request, "init_info"))

    def shutdown_weight_transfer_engine(self) -> None:
        self._thread.call(self.engine.shutdown_weight_transfer_engine)

    def start_weight_update(self) -> None:
        self._thread.call(self.engine.start_weight_update)

    def update_weights(self, request: Any) -> None:
        """Receive one batch of tensors by broadcast and stage it: ``{"update_info": {...}}``
        or a ``WeightTransferUpdateRequest``; generation goes on meanwhile."""
        self._thread.call(self.engine.update_weights, unwrap(request, "update_info"))

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        """Apply the staged weights at the next step boundary; later tokens carry
        ``weight_version``."""
        self._thread.call(self.engine.finish_weight_update, weight_version)

    def update_weight_version(self, new_version: str) -> None:
        self._thread.call(self.engine.update_weight_version, new_version)

    def set_weight_version(self, weight_version: str) -> None:
        """vLLM's ``LLMEngine.set_weight_version`` (``update_weight_version``)."""
        self._thread.call(self.engine.update_weight_version, weight_version)

    def get_weight_version(self) -> str:
        return self._thread.call(self.engine.get_weight_version)

    def get_world_size(self, include_dp: bool = True) -> int:
        """TP x PP worker ranks, times DP when ``include_dp`` (vLLM's)."""
        return self.engine.get_world_size(include_dp)

    # -- LoRA adapters (vLLM's LLMEngine methods: adapters by lora_int_id) ------------------

    def add_lora(self, lora_request: LoRARequest) -> bool:
        """Load an adapter on every worker; False if one of its name was loaded. A bad one
        raises ``InvalidRequestError`` naming it (the engine goes on)."""
        return self._thread.call(self.engine.add_lora, lora_request)

    def remove_lora(self, lora_id: int) -> bool:
        """Forget the adapter of ``lora_int_id`` ``lora_id``; False if none is loaded."""
        name = lora_name_of(self.engine.list_loras(), lora_id)
        return name is not None and self._thread.call(self.engine.remove_lora, name)

    def list_loras(self) -> set[int]:
        """The ``lora_int_id`` of every adapter loaded."""
        return {r.lora_int_id for r in self.engine.list_loras()}

    def pin_lora(self, lora_id: int) -> bool:
        """vLLM's ``LLMEngine.pin_lora``: keep the adapter of ``lora_int_id`` ``lora_id``
        resident until removed (``AsyncEngine.pin_lora``)."""
        name = pin_target(self.engine.list_loras(), lora_id)
        return bool(self._thread.call(self.engine.pin_lora, name))

    def start_profile(
        self,
        profile_prefix: str | None = None,
        *,
        delay_iterations: int | None = None,
        max_iterations: int | None = None,
    ) -> None:
        """Start the torch profiler (needs ``profiler_dir``). vLLM's options must keep
        their defaults, else ``NotImplementedError`` naming them: ``profile_prefix`` (the
        trace's file names are the engine's), ``delay_iterations`` None or 0 (profiling
        starts at once), ``max_iterations`` None or 0 (it runs until ``stop_profile``)."""
        check_profile_options(
            f"{type(self).__name__}.start_profile", profile_prefix, delay_iterations,
            max_iterations,
        )  # fmt: skip
        self._thread.call(self.engine.start_profile)

    def get_supported_tasks(self) -> tuple[str, ...]:
        """The model's tasks, as vLLM's (:func:`supported_tasks`)."""
        return supported_tasks(self.engine)

    @property
    def tokenizer(self) -> Any:
        """vLLM's ``LLMEngine.tokenizer``: the engine's Hugging Face tokenizer."""
        return self.engine.tokenizer

    def do_log_stats(self) -> None:
        """vLLM's: log one line of the engine's state now."""
        log_stats_line(self.get_stats())

    def stop_profile(self) -> None:
        """Stop the profiler and write its trace under ``profiler_dir``; ``ProfilerError``
        when it is not running."""
        self._thread.call(self.engine.stop_profile)

    def get_tokenizer(self) -> Any:
        """The Hugging Face tokenizer the engine uses."""
        return self.engine.tokenizer

    # -- lifetime -------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the engine and its threads (idempotent)."""
        self._bridge.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def supported_tasks(engine: AsyncEngine) -> tuple[str, ...]:
    """The model's tasks, as vLLM's ``get_supported_tasks``: ``("generate",)``, or a
    pooling model's own (``"embed"``, ``"token_embed"``, ``"classify"``, ...)."""
    pooling = engine.pooling_model
    return ("generate",) if pooling is None else tuple(pooling.tasks)


def check_profile_options(
    method: str,
    profile_prefix: str | None,
    delay_iterations: int | None,
    max_iterations: int | None,
) -> None:
    """vLLM's ``start_profile`` options at their defaults only (the profiler starts at
    once, runs until ``stop_profile``, names its own traces); else ``NotImplementedError``
    naming the option."""
    check_options(
        method,
        profile_prefix=profile_prefix,
        delay_iterations=delay_iterations or None,
        max_iterations=max_iterations or None,
    )


def log_stats_line(stats: EngineStats) -> None:
    """vLLM's ``do_log_stats`` line: running and waiting requests, KV cache usage."""
    logger.info(
        "Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%",
        stats.num_running_reqs,
        stats.num_waiting_reqs,
        100.0 * stats.kv_cache_usage,
    )


def lora_name_of(loaded: Iterable[LoRARequest], lora_id: int) -> str | None:
    """The name of the loaded adapter whose ``lora_int_id`` is ``lora_id`` (vLLM's key)."""
    return next((r.lora_name for r in loaded if r.lora_int_id == lora_id), None)


def pin_target(loaded: Iterable[LoRARequest], lora_id: int) -> str:
    """The adapter ``pin_lora(lora_id)`` names; vLLM's refusal when none is loaded."""
    name = lora_name_of(loaded, lora_id)
    if name is None:
        raise InvalidRequestError(
            f"Pinning failed. LoRA {lora_id} is not registered.", param="lora_id"
        )
    return name


class _ApplyModel:
    """``func`` applied to a worker's model: a picklable callable for ``collective_rpc``
    (a remote rank receives it with ``func``)."""

    def __init__(self, func: Callable[[Any], Any]) -> None:
        self.func = func

    def __call__(self, worker: Any) -> Any:
        return self.func(worker.get_model())
