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
from collections.abc import AsyncGenerator, Iterable, Mapping
from concurrent.futures import Future
from typing import Any, Self

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from actorllm.compat.vllm.async_llm_control import AsyncControlMethods
from actorllm.compat.vllm.bridge import Bridge
from actorllm.compat.vllm.caller_loop import put, read_outputs
from actorllm.compat.vllm.engine_args import AsyncEngineArgs, EngineArgs
from actorllm.compat.vllm.not_built import ASYNC_LLM_NOT_BUILT, check_options, not_built, refuse
from actorllm.compat.vllm.offline_prompts import check_prompt
from actorllm.compat.vllm.output_collector import RequestOutputCollector
from actorllm.compat.vllm.sync_facade import supported_tasks
from actorllm.core.lora import LoRARequest
from actorllm.core.outputs import RequestOutput
from actorllm.core.pooling_params import PoolingParams
from actorllm.core.sampling_params import SamplingParams
from actorllm.engine.api.async_engine import AsyncEngine
from actorllm.engine.api.pooling_outputs import PoolingOutput, PoolingRequestOutput
from actorllm.engine.api.request_fields import check_arrival_time
from actorllm.engine.config.engine_config import EngineConfig
from actorllm.engine.config.model_config import ModelConfig
from actorllm.engine.errors import EngineDeadError
from actorllm.worker.worker_thread import LoopPoster

logger = logging.getLogger("actorllm.engine")


def _check_options(
    sampling_params: object, method: str = "AsyncLLM.generate", **options: Any
) -> None:
    """``generate``'s vLLM options that are not built refuse any value but None."""
    check_options(method, **options)
    if not isinstance(sampling_params, SamplingParams):
        raise TypeError(
            f"sampling_params must be SamplingParams, got {type(sampling_params).__name__}."
        )


class AsyncLLM(AsyncControlMethods):
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
            reasoning_parser_kwargs=reasoning_parser_kwargs,
        )
        if self.errored:  # vLLM's add_request: a stopped engine takes no request
            raise self.dead_error
        pump, send, receive = self._submit(
            request_id, check_prompt(prompt), sampling_params, priority, lora_request,
            reasoning_ended=reasoning_ended,
        )  # fmt: skip
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

    async def add_request(
        self,
        request_id: str,
        prompt: Any,
        params: SamplingParams | PoolingParams,
        arrival_time: float | None = None,
        lora_request: LoRARequest | None = None,
        tokenization_kwargs: Mapping[str, Any] | None = None,
        trace_headers: Mapping[str, str] | None = None,
        priority: int = 0,
        data_parallel_rank: int | None = None,
        session_id: str | None = None,
        prompt_text: str | None = None,
        reasoning_ended: bool | None = None,
        reasoning_parser_kwargs: dict[str, Any] | None = None,
        kv_hints: Any = None,
    ) -> RequestOutputCollector:
        """vLLM's: start a request and return its ``RequestOutputCollector``, whose
        ``get()`` / ``get_nowait()`` hand out its outputs, folded when several came
        between two reads (:mod:`output_collector`). ``generate``'s rules for the prompt,
        the parameters and the options; ``arrival_time`` (``time.time()`` seconds) orders
        it among the waiting requests. Pooling requests run through :meth:`encode`
        (``PoolingParams`` here is refused by name)."""
        if isinstance(params, PoolingParams):
            refuse("AsyncLLM.add_request(params=PoolingParams)", "pooling requests run "
                   "through AsyncLLM.encode")  # fmt: skip
        _check_options(
            params,
            "AsyncLLM.add_request",
            prompt_text=prompt_text,
            tokenization_kwargs=tokenization_kwargs or None,
            trace_headers=trace_headers or None,
            data_parallel_rank=data_parallel_rank,
            session_id=session_id,
            reasoning_parser_kwargs=reasoning_parser_kwargs,
            kv_hints=kv_hints,
        )
        if self.errored:
            raise self.dead_error
        arrival = check_arrival_time(arrival_time)
        pump, send, receive = self._submit(
            request_id, check_prompt(prompt), params, priority, lora_request, arrival,
            reasoning_ended=reasoning_ended,
        )  # fmt: skip
        if self.log_requests:
            logger.info("Added request %s.", request_id)

        def ended() -> None:  # the collector read the request's last item
            send.close()
            if self._requests.get(request_id) is pump:
                del self._requests[request_id]
                del self._engine_ids[request_id]

        return RequestOutputCollector(params.output_kind, request_id, receive, ended)

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
        arrival_time: float | None = None,
        *,
        reasoning_ended: bool | None = None,
    ) -> tuple[Future[Any], MemoryObjectSendStream[object], MemoryObjectReceiveStream[object]]:
        """Start the request on the engine's loop, its outputs posted into a new stream on
        the caller's loop; returns its pump and the stream's two ends. ``reasoning_ended``:
        vLLM's, where structured outputs start (``AsyncEngine.generate``'s)."""
        poster = LoopPoster()  # the caller's loop
        send, receive = anyio.create_memory_object_stream[object](math.inf)

        def deliver(item: object) -> None:  # on the engine's thread
            poster.post(put, send, item)

        try:
            options: dict[str, Any] = {"priority": priority, "lora_request": lora_request}
            if arrival_time is not None:
                options["arrival_time"] = arrival_time
            if reasoning_ended is not None:
                options["reasoning_ended"] = reasoning_ended
            pump, engine_id = self._bridge.submit(request_id, prompt, params, deliver, **options)
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
        """The model's tasks, as vLLM's (``sync_facade.supported_tasks``)."""
        return supported_tasks(self.engine)

    def get_default_sampling_params(self) -> SamplingParams:
        return self.engine.get_default_sampling_params()

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
