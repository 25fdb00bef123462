"""``AsyncLLM``'s control plane (vLLM's): sleep and wake-up, pause and resume, the prefix
cache, the profiler, weight transfer, worker RPC and LoRA adapters, each awaited on the
caller's asyncio loop while it runs on the engine's (:func:`~.caller_loop.call_on_engine`).
A mixin of :class:`~actorllm.compat.vllm.async_llm.AsyncLLM`: it needs the ``engine`` and
the engine ``_thread`` of its instance.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from actorllm.compat.vllm.caller_loop import call_on_engine
from actorllm.compat.vllm.sync_facade import (
    check_profile_options,
    log_stats_line,
    lora_name_of,
    pin_target,
)
from actorllm.compat.vllm.weight_transfer import unwrap
from actorllm.core.lora import LoRARequest
from actorllm.engine.recovery.pause import PauseMode

if TYPE_CHECKING:
    from actorllm.compat.vllm.engine_thread import EngineThread
    from actorllm.engine.api.async_engine import AsyncEngine


class AsyncControlMethods:
    """Mixed into ``AsyncLLM``."""

    engine: AsyncEngine
    _thread: EngineThread

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

    async def compute_weight_checksums(self) -> list[dict[str, str]]:
        """vLLM's: every worker rank's ``{"dp..:pp..:pcp0:tp..:<parameter>": SHA-256}``
        (``AsyncEngine.compute_weight_checksums``)."""
        result: list[dict[str, str]] = await self._call(self.engine.compute_weight_checksums)
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
