"""``AsyncLLMEngine`` (vLLM's ``AsyncLLM``): the engine for an asyncio application.

    import asyncio
    from actorllm import AsyncEngineArgs, AsyncLLMEngine, SamplingParams

    async def main():
        engine = AsyncLLMEngine.from_engine_args(AsyncEngineArgs(max_model_len=256))
        async for out in engine.generate("Hello", SamplingParams(max_tokens=8), "r1"):
            print(out.outputs[0].text)
        engine.shutdown()

    asyncio.run(main())

The engine runs on its own thread and event loop (:mod:`actorllm.compat.vllm.bridge`,
as under ``LLM``); the caller's asyncio loop (asyncio only, as vLLM's) is never blocked
by it, only by the constructor (the model loads) and :meth:`shutdown` (the engine stops),
as in vLLM. ``generate`` is an async generator on the caller's loop: a task on the
engine's loop reads the request's outputs and posts each one to the caller's loop
(``LoopPoster``: ``call_soon_threadsafe``) into a memory stream. A caller that falls behind
reads the outputs it missed merged into one (DELTA pieces joined, CUMULATIVE the newest),
as vLLM's. Cancelling the caller's task, or closing its generator early, aborts the
request and frees its KV blocks.

actorllm's native async API (structured concurrency, trio or asyncio, in the caller's own
loop) is :class:`actorllm.AsyncEngine`.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from concurrent.futures import Future
from functools import partial
from typing import Any, Self

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from actorllm.compat.vllm.bridge import Bridge
from actorllm.compat.vllm.caller_loop import call_on_engine, put, read_outputs
from actorllm.compat.vllm.engine_args import AsyncEngineArgs, EngineArgs
from actorllm.compat.vllm.not_built import ASYNC_LLM_NOT_BUILT, check_options, not_built, refuse
from actorllm.compat.vllm.offline_prompts import check_prompt
from actorllm.compat.vllm.sync_facade import (
    check_profile_options,
    log_stats_line,
    lora_name_of,
    pin_target,
)
from actorllm.compat.vllm.weight_transfer import unwrap
from actorllm.core.lora import LoRARequest
from actorllm.core.outputs import RequestOutput
from actorllm.core.pooling_params import PoolingParams
from actorllm.core.sampling_params import SamplingParams
from actorllm.engine.api.async_engine import AsyncEngine
from actorllm.engine.api.pooling_outputs import PoolingOutput, PoolingRequestOutput
from actorllm.engine.config.engine_config import EngineConfig
from actorllm.engine.config.model_config import ModelConfig
from actorllm.engine.errors import EngineDeadError
from actorllm.engine.recovery.pause import PauseMode
from actorllm.worker.worker_thread import LoopPoster

logger = logging.getLogger("actorllm.engine")


def _check_options(sampling_params: object, **options: Any) -> None:
    """``generate``'s vLLM options that are not built refuse any value but None."""
    check_options("AsyncLLM.generate", **options)
    if not isinstance(sampling_params, SamplingParams):
        raise TypeError(
            f"sampling_params must be SamplingParams, got {type(sampling_params).__name__}."
        )


class AsyncLLM:
    """vLLM's ``AsyncLLM``/``AsyncLLMEngine``. Build it with :meth:`from_engine_args` (or
    :meth:`from_vllm_config` with an ``EngineConfig``)."""

    def __init__(
        self,
        config: EngineConfig,
        *,
        log_requests: bool = False,
        log_stats: bool = True,
        backend: str = "trio",
        hf_token: str | bool | None = None,
    ) -> None:
        self._bridge = Bridge(
            config,
            {"hf_token": hf_token},
            backend=backend,
            name="actorllm-asyncllm",
            log_stats=log_stats,
        )
        self._thread = self._bridge.thread
        self.engine: AsyncEngine = self._bridge.engine
        self.log_requests = log_requests
        self.log_stats = log_stats
        self._requests: dict[str, Future[Any]] = {}  # {request id: its pump on the engine loop}
        self._engine_ids: dict[str, str] = {}  # {open request id: its engine-side id}

    @classmethod
    def from_engine_args(
        cls,
        engine_args: EngineArgs | EngineConfig,
        start_engine_loop: bool = True,
        usage_context: Any = None,
        stat_loggers: list[Any] | None = None,
    ) -> Self:
        """The engine ``engine_args`` describe (``AsyncEngineArgs``, ``EngineArgs`` or an
        ``EngineConfig``). Blocks until the model is loaded. ``stat_loggers`` (custom stat
        logger factories) and ``start_engine_loop=False`` are refused."""
        if stat_loggers:
            refuse("stat_loggers", "custom stat loggers are not supported")
        if not start_engine_loop:
            refuse("start_engine_loop", "the engine always starts at once (on its own thread)")
        if isinstance(engine_args, EngineConfig):
            return cls(engine_args)
        if not isinstance(engine_args, EngineArgs):
            raise TypeError(
                "engine_args must be AsyncEngineArgs, EngineArgs or an EngineConfig, "
                f"got {type(engine_args).__name__}."
            )
        return cls(
            engine_args.create_engine_config(),
            log_requests=getattr(engine_args, "enable_log_requests", False),
            log_stats=not engine_args.disable_log_stats,
            hf_token=engine_args.hf_token,
        )

    @classmethod
    def from_vllm_config(
        cls,
        vllm_config: EngineConfig,
        start_engine_loop: bool = True,
        usage_context: Any = None,
        stat_loggers: list[Any] | None = None,
        enable_log_requests: bool = False,
        disable_log_stats: bool = False,
        **kwargs: Any,
    ) -> Self:
        """vLLM's constructor by config object; here ``vllm_config`` is an ``EngineConfig``."""
        if not isinstance(vllm_config, EngineConfig):
            raise TypeError(f"vllm_config must be an EngineConfig, got {type(vllm_config)}.")
        defaults = {
            "aggregate_engine_logging": False,
            "client_addresses": None,
            "client_count": 1,
            "client_index": 0,
        }
        for name, value in kwargs.items():
            if name == "aggregate_engine_logging":
                continue  # the stats line is always aggregated over replicas here
            if name not in defaults:
                raise TypeError(f"from_vllm_config got an unexpected keyword argument {name!r}.")
            if value != defaults[name]:
                refuse(name, "only one in-process client is supported")
        if stat_loggers:
            refuse("stat_loggers", "custom stat loggers are not supported")
        if not start_engine_loop:
            refuse("start_engine_loop", "the engine always starts at once (on its own thread)")
        return cls(vllm_config, log_requests=enable_log_requests, log_stats=not disable_log_stats)

    # -- requests -------------------------------------------------------------------------

    async def generate(
        self,
        prompt: Any,
        sampling_params: SamplingParams,
        request_id: str,
        *,
        prompt_text: str | None = None,
        lora_request: LoRARequest | None = None,
        tokenization_kwargs: Mapping[str, Any] | None = None,
        trace_headers: Mapping[str, str] | None = None,
        priority: int = 0,
        data_parallel_rank: int | None = None,
        session_id: str | None = None,
        reasoning_ended: bool | None = None,
        reasoning_parser_kwargs: dict[str, Any] | None = None,
    ) -> AsyncGenerator[RequestOutput, None]:
        """The outputs of one request as it runs (``sampling_params.output_kind``: DELTA,
        CUMULATIVE or FINAL_ONLY). ``prompt`` is a str, a ``TextPrompt`` or a
        ``TokensPrompt``. Iterate it on an asyncio loop. Invalid requests
        raise ``InvalidRequestError`` (a ``ValueError``) on the first iteration."""
        _check_options(
            sampling_params,
            prompt_text=prompt_text,
            tokenization_kwargs=tokenization_kwargs or None,
            trace_headers=trace_headers or None,
            data_parallel_rank=data_parallel_rank,
            session_id=session_id,
            reasoning_ended=reasoning_ended,
            reasoning_parser_kwargs=reasoning_parser_kwargs,
        )
        if self.errored:  # vLLM's add_request: a stopped engine takes no request
            raise self.dead_error
        pump, send, receive = self._submit(
            request_id, check_prompt(prompt), sampling_params, priority, lora_request
        )
        if self.log_requests:
            logger.info("Added request %s.", request_id)
        finished = False
        try:
            with send, receive:  # later posts (the caller left) are dropped
                try:
                    async for out in read_outputs(receive, sampling_params.output_kind):
                        finished = out.finished
                        yield out
                except Exception:  # the request's error ended it
                    finished = True
                    raise
                finished = True
            if self.log_requests:
                logger.info("Finished request %s.", request_id)
        finally:
            if self._requests.get(request_id) is pump:
                del self._requests[request_id]
                del self._engine_ids[request_id]
            if not finished:
                self._bridge.retire(request_id)
                pump.cancel()  # its stream closes on the engine loop: the engine aborts it
                if self.log_requests:
                    logger.info("Aborted request %s.", request_id)

    async def encode(
        self,
        prompt: Any,
        pooling_params: PoolingParams,
        request_id: str,
        lora_request: Any = None,
        trace_headers: Mapping[str, str] | None = None,
        priority: int = 0,
        truncate_prompt_tokens: int | None = None,
        tokenization_kwargs: Mapping[str, Any] | None = None,
    ) -> AsyncGenerator[PoolingRequestOutput[PoolingOutput], None]:
        """A pooling model's result for one prompt (vLLM's ``AsyncLLM.encode``): one
        ``PoolingRequestOutput``. Cancelling the caller aborts the request."""
        check_options(
            "AsyncLLM.encode",
            lora_request=lora_request,
            trace_headers=trace_headers or None,
            tokenization_kwargs=tokenization_kwargs or None,
        )
        prompt = check_prompt(prompt)
        engine = self.engine

        async def run() -> PoolingRequestOutput[PoolingOutput]:
            result = None
            async for out in engine.encode(
                prompt, pooling_params, request_id, priority,
                truncate_prompt_tokens=truncate_prompt_tokens,
            ):  # fmt: skip
                result = out
            assert result is not None
            return result

        yield await self._call(run)

    def _submit(
        self,
        request_id: str,
        prompt: Any,
        params: SamplingParams,
        priority: int,
        lora_request: LoRARequest | None = None,
    ) -> tuple[Future[Any], MemoryObjectSendStream[object], MemoryObjectReceiveStream[object]]:
        """Start the request on the engine's loop, its outputs posted into a new stream on
        the caller's loop; returns its pump and the stream's two ends."""
        poster = LoopPoster()  # the caller's loop
        send, receive = anyio.create_memory_object_stream[object](math.inf)

        def deliver(item: object) -> None:  # on the engine's thread
            poster.post(put, send, item)

        try:
            pump, engine_id = self._bridge.submit(
                request_id, prompt, params, deliver, priority=priority, lora_request=lora_request
            )
        except BaseException:  # the engine was shut down
            send.close()
            receive.close()
            raise
        self._requests[request_id] = pump
        self._engine_ids[request_id] = engine_id
        return pump, send, receive

    async def abort(self, request_id: str | Iterable[str], internal: bool = False) -> None:
        """Abort requests; each one's ``generate`` ends with a last output whose
        ``finish_reason`` is ``"abort"``. Unknown or finished ids are ignored."""
        ids = [request_id] if isinstance(request_id, str) else list(request_id)
        for rid in ids:
            engine_id = self._engine_ids.get(rid)
            if engine_id is not None:
                self._bridge.retire(rid)
                await self._call(self.engine.abort, engine_id)
        if self.log_requests:
            logger.info("Aborted request(s) %s.", ",".join(ids))

    def get_num_unfinished_requests(self) -> int:
        return len(self._requests)

    def check_admission(self, n: int = 1, request_id: str | None = None) -> None:
        """vLLM's: raise ``QueueOverflowError`` / ``MaxQueuedTokensError`` (HTTP 503 on a
        server) for a request of ``n`` sequences ``max_num_queued_reqs`` /
        ``max_num_queued_tokens`` would not admit; a custom front end calls it before
        ``generate``, as vLLM's server does. It reads the engine's ledger from this thread
        (a snapshot of its entries; nothing is changed)."""
        self.engine.check_admission(n, request_id)

    def get_num_queued_tokens(self) -> int:
        """vLLM's: prompt tokens of the open requests with no output token yet."""
        return self.engine.get_num_queued_tokens()

    async def wait_for_requests_to_drain(self, drain_timeout: int = 300) -> None:
        """vLLM's: wait (without refusing new ones) until no request is open; raises
        ``TimeoutError`` after ``drain_timeout`` seconds. This front door is the engine's
        only client, so its open requests are the engine's."""
        deadline = time.monotonic() + drain_timeout
        while self._requests:  # polled, as vLLM's: requests end on the engine's thread
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"Timeout reached after {drain_timeout} seconds waiting for requests to drain."
                )
            await anyio.sleep(0.05)

    # -- the model ------------------------------------------------------------------------

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    def get_tokenizer(self) -> Any:
        """The Hugging Face tokenizer (synchronous, as in vLLM 0.11+)."""
        return self.engine.tokenizer

    @property
    def model_config(self) -> ModelConfig:
        return self.engine.model_config

    async def get_model_config(self) -> ModelConfig:
        """vLLM's older async accessor of :attr:`model_config`."""
        return self.model_config

    @property
    def vllm_config(self) -> EngineConfig:
        """The engine's configuration (an ``EngineConfig`` here)."""
        return self.engine.config

    async def get_vllm_config(self) -> EngineConfig:
        return self.engine.config

    async def get_supported_tasks(self) -> tuple[str, ...]:
        """The model's tasks, as vLLM's: ``("generate",)``, or a pooling model's own
        (``"embed"``, ``"token_embed"``, ``"classify"``)."""
        pooling = self.engine.pooling_model
        return ("generate",) if pooling is None else tuple(pooling.tasks)

    def get_default_sampling_params(self) -> SamplingParams:
        return self.engine.get_default_sampling_params()

    # -- control plane --------------------------------------------------------------------

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``await fn(*args)`` on the engine's loop, awaited on the caller's; cancelling the
        caller cancels it."""
        return await call_on_engine(self._thread, fn, *args)

    async def sleep(self, level: int = 1, mode: PauseMode = "abort") -> None:
        """vLLM's sleep: ``mode`` (default abort) says what happens to the requests in
        flight; see ``AsyncEngine.sleep``."""
        await self._call(self.engine.sleep, level, mode)

    async def wake_up(self, tags: list[str] | None = None) -> bool:
        """Restore ``tags`` (``["weights"]``, ``["kv_cache"]``, ``["scheduling"]``; None:
        everything); whether the engine is fully awake."""
        return bool(await self._call(self.engine.wake_up, tags))

    async def reset_mm_cache(self) -> None:
        """vLLM's: clear the multimodal processor and encoder caches. The models served
        here take no multimodal inputs: those caches do not exist, nothing to clear."""

    async def reset_encoder_cache(self) -> None:
        """vLLM's: as :meth:`reset_mm_cache`, nothing to clear."""

    async def release_kv_cache_memory(self) -> None:
        """vLLM's: free the KV cache alone after a completed ``sleep(level=0)``; see
        ``AsyncEngine.release_kv_cache_memory``."""
        await self._call(self.engine.release_kv_cache_memory)

    async def pause_generation(
        self,
        *,
        mode: PauseMode = "abort",
        wait_for_inflight_requests: bool | None = None,
        clear_cache: bool = True,
    ) -> None:
        """vLLM's pause: ``mode`` abort (default), wait or keep; see
        ``AsyncEngine.pause_generation``. ``wait_for_inflight_requests=True`` is vLLM's
        deprecated spelling of ``mode="wait"``."""
        if wait_for_inflight_requests:
            warnings.warn(
                "AsyncLLM.pause_generation(wait_for_inflight_requests=...) is deprecated; "
                "use mode='wait'.",
                DeprecationWarning,
                stacklevel=2,
            )
            mode = "wait"
        await self._call(partial(self.engine.pause_generation, mode=mode, clear_cache=clear_cache))

    async def resume_generation(self) -> None:
        await self._call(self.engine.resume_generation)

    async def is_paused(self) -> bool:
        return bool(await self._call(self.engine.is_paused))

    async def is_sleeping(self) -> bool:
        return bool(await self._call(self.engine.is_sleeping))

    async def reset_prefix_cache(
        self, reset_running_requests: bool = False, reset_connector: bool = False
    ) -> bool:
        """vLLM's options are refused when on (``AsyncEngine.reset_prefix_cache``)."""
        call = partial(
            self.engine.reset_prefix_cache,
            reset_running_requests=reset_running_requests,
            reset_connector=reset_connector,
        )
        return bool(await self._call(call))

    async def start_profile(
        self,
        profile_prefix: str | None = None,
        *,
        delay_iterations: int | None = None,
        max_iterations: int | None = None,
    ) -> None:
        """Start the profiler; vLLM's options only at their defaults (``profile_prefix``:
        the trace goes under ``profiler_dir`` with the engine's own names; no delay, no
        step limit), else ``NotImplementedError`` naming the option."""
        check_profile_options(
            "AsyncLLM.start_profile", profile_prefix, delay_iterations, max_iterations
        )
        await self._call(self.engine.start_profile)

    async def stop_profile(self) -> None:
        await self._call(self.engine.stop_profile)

    async def init_weight_transfer_engine(self, request: Any) -> None:
        await self._call(self.engine.init_weight_transfer_engine, unwrap(request, "init_info"))

    async def shutdown_weight_transfer_engine(self) -> None:
        await self._call(self.engine.shutdown_weight_transfer_engine)

    async def start_weight_update(self) -> None:
        await self._call(self.engine.start_weight_update)

    async def update_weights(self, request: Any) -> None:
        await self._call(self.engine.update_weights, unwrap(request, "update_info"))

    async def finish_weight_update(self, weight_version: str | None = None) -> None:
        await self._call(self.engine.finish_weight_update, weight_version)

    async def update_weight_version(self, new_version: str) -> None:
        await self._call(self.engine.update_weight_version, new_version)

    async def get_weight_version(self) -> str:
        return str(await self._call(self.engine.get_weight_version))

    async def collective_rpc(
        self,
        method: str | Callable[..., Any],
        timeout: float | None = None,  # noqa: ASYNC109 (vLLM's signature)
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> list[Any]:
        async def run() -> list[Any]:
            return await self.engine.collective_rpc(
                method, timeout=timeout, args=tuple(args), kwargs=dict(kwargs or {})
            )

        result: list[Any] = await self._call(run)
        return result

    async def add_lora(self, lora_request: LoRARequest) -> bool:
        """Load an adapter on every worker; False if one of its name was loaded. A bad one
        raises ``InvalidRequestError`` naming it."""
        return bool(await self._call(self.engine.add_lora, lora_request))

    async def remove_lora(self, lora_id: int) -> bool:
        """Forget the adapter of ``lora_int_id`` ``lora_id``; False if none is loaded."""
        name = lora_name_of(self.engine.list_loras(), lora_id)
        return name is not None and bool(await self._call(self.engine.remove_lora, name))

    async def list_loras(self) -> set[int]:
        """The ``lora_int_id`` of every adapter loaded."""
        return {r.lora_int_id for r in self.engine.list_loras()}

    async def pin_lora(self, lora_id: int) -> bool:
        """vLLM's: keep the adapter of ``lora_int_id`` ``lora_id`` resident, never evicted,
        until removed (``AsyncEngine.pin_lora``); ``InvalidRequestError`` (a ValueError, as
        vLLM's) when none is loaded or every slot is pinned already."""
        name = pin_target(self.engine.list_loras(), lora_id)
        return bool(await self._call(self.engine.pin_lora, name))

    async def is_tracing_enabled(self) -> bool:
        return False

    async def do_log_stats(self) -> None:
        """Log one line of the engine's state now (the periodic line: ``disable_log_stats``)."""
        log_stats_line(await self._call(self.engine.get_stats))

    async def get_stats(self) -> Any:
        return await self._call(self.engine.get_stats)

    # -- health and lifetime --------------------------------------------------------------

    @property
    def errored(self) -> bool:
        # vLLM's is True once the engine stopped for any reason, shutdown included, so
        # check_health and new requests fail rather than report a stopped engine healthy.
        return self.engine.is_dead or self._thread.failure is not None or self._thread.closed

    @property
    def is_stopped(self) -> bool:
        return self.errored

    @property
    def is_running(self) -> bool:
        return not self.errored

    @property
    def should_keep_api_server_alive(self) -> bool:
        return False  # vLLM's is True only on a retired elastic-EP rank (not supported)

    @property
    def dead_error(self) -> BaseException:
        return EngineDeadError("the engine died")

    async def check_health(self) -> None:
        if self.errored:
            raise self.dead_error

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop the engine and its threads (idempotent); open ``generate`` calls end with
        ``EngineClosedError``; later ones, and ``check_health``, raise ``EngineDeadError``
        (vLLM's). Blocks until the engine stopped."""
        self._bridge.close()

    def __getattr__(self, name: str) -> Any:
        # vLLM's methods for features not built here refuse by name (not_built.py).
        return not_built(self, name, ASYNC_LLM_NOT_BUILT, is_async=True)


AsyncLLMEngine = AsyncLLM

__all__ = ["AsyncEngineArgs", "AsyncLLM", "AsyncLLMEngine"]
