"""The one thread bridge under ``LLM``, ``LLMEngine`` and ``AsyncLLM``.

vLLM's front doors are synchronous (``LLM``, ``LLMEngine``) or run on the caller's asyncio
loop (``AsyncLLM``); the engine is an :class:`AsyncEngine` on an event loop of its own. A
:class:`Bridge` owns that engine and its thread (:mod:`engine_thread`) and gives the front
doors three things, each written once:

* **start-up**: vLLM's arguments translated (:func:`args.engine_config`), the Hugging Face
  token exported, the engine started, and (unless disabled) vLLM's periodic stats line;
* **request ids**: the caller names requests; an aborted request may still be winding down
  in the engine, so a later request with the same id runs under a fresh engine-side id
  (``"a#1"``) and its outputs are renamed back (:class:`RequestIds`);
* **the pump** (:func:`pump`): on the engine's loop, one request's outputs handed to a
  callback, renamed to the caller's id, then an end marker or the error that ended it.

Closing is optional: ``close()``, ``with``, ``del`` and the end of the script all stop the
engine and its threads (see :mod:`engine_thread`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from os import PathLike
from pathlib import Path
from typing import Any, Final, final

import msgspec

from actorllm.compat.vllm import args
from actorllm.compat.vllm.engine_thread import EngineThread
from actorllm.core.outputs import RequestOutput
from actorllm.core.sampling_params import SamplingParams
from actorllm.engine.api.async_engine import AsyncEngine
from actorllm.engine.api.stats_logger import log_stats_forever
from actorllm.engine.config.engine_config import EngineConfig
from actorllm.engine.errors import EngineClosedError

STATS_INTERVAL_S = 10.0  # vLLM's VLLM_LOG_STATS_INTERVAL default

END: Final = object()  # handed to the pump's callback after a request's last output

Deliver = Callable[[object], None]  # a RequestOutput, then END or the exception


@final
class RequestIds:
    """The engine-side id of each caller request id. Not thread-safe: the caller's thread
    (or loop) only."""

    def __init__(self) -> None:
        self._retired: set[str] = set()  # caller ids aborted here: their runs may linger
        self._runs = 0  # numbers the fresh engine-side ids

    def engine_id(self, request_id: str) -> str:
        """``request_id`` itself, or ``request_id#n`` when a run under it was aborted."""
        if request_id not in self._retired:
            return request_id
        self._runs += 1
        return f"{request_id}#{self._runs}"

    def retire(self, request_id: str) -> None:
        """The request was aborted: its engine-side id may still be in use for a while."""
        self._retired.add(request_id)


def caller_view(out: RequestOutput, request_id: str) -> RequestOutput:
    """``out`` under the caller's request id (the engine may have run it under another)."""
    if out.request_id == request_id:
        return out
    return msgspec.structs.replace(out, request_id=request_id)


async def pump(
    engine: AsyncEngine,
    request_id: str,
    engine_id: str,
    prompt: Any,
    params: SamplingParams,
    options: Mapping[str, Any],
    deliver: Deliver,
) -> None:
    """On the engine's loop: run one request and ``deliver`` each output (under
    ``request_id``), then :data:`END`, the request's exception, or (cancelled: the caller
    left, or the engine is closing) ``EngineClosedError``, so no caller waits forever.
    ``options`` are ``AsyncEngine.generate``'s keywords (``priority``, ``arrival_time``).
    (A function, not a method: a running request must not keep its front door alive.)"""
    last: object = EngineClosedError("the engine was shut down")
    try:
        async for out in engine.generate(prompt, params, request_id=engine_id, **options):
            deliver(caller_view(out, request_id))
        last = END
    except Exception as exc:  # the request's own failure, or the engine's
        last = exc
    finally:
        deliver(last)


# AsyncEngine.open's keywords that are not engine settings: passed through as they are.
OPEN_OPTIONS = ("runner_factory", "tokenizer", "connector_factory")


@final
class Bridge:
    """One engine on its own thread, for one front door. ``model`` is a model directory,
    an ``EngineConfig`` or None (the demo model); ``config`` holds vLLM's engine keywords
    (see :mod:`args`), ``hf_token`` among them, and may hold ``AsyncEngine.open``'s own
    options (:data:`OPEN_OPTIONS`: a scripted runner, a loaded tokenizer, for tests and
    embedders). Blocks until the engine is up."""

    def __init__(
        self,
        model: str | Path | EngineConfig | None,
        config: Mapping[str, Any],
        *,
        backend: str = "trio",
        name: str = "actorllm-engine",
        log_stats: bool = False,
    ) -> None:
        kwargs = dict(config)
        args.export_hf_token(kwargs.pop(args.HF_TOKEN, None))
        # A tokenizer given as a name or directory (vLLM's meaning) is an engine setting;
        # only a loaded one is passed through.
        options = {
            k: kwargs.pop(k) for k in OPEN_OPTIONS
            if k in kwargs and not (k == "tokenizer" and isinstance(kwargs[k], str | PathLike))
        }  # fmt: skip
        self.thread = EngineThread(
            args.engine_config(model, **kwargs), backend=backend, name=name, **options
        )
        self.engine: AsyncEngine = self.thread.engine
        self.ids = RequestIds()
        if log_stats:
            self.thread.spawn(log_stats_forever, self.engine, STATS_INTERVAL_S)
        # Dropping the last reference closes the engine; the thread module closes every
        # engine still open at interpreter exit.
        self._finalizer = weakref.finalize(self, self.thread.close)

    def submit(
        self,
        request_id: str,
        prompt: Any,
        params: SamplingParams,
        deliver: Deliver,
        **options: Any,
    ) -> tuple[Future[Any], str]:
        """Start one request on the engine's loop (:func:`pump`); returns its task (cancel
        it to abort the request) and its engine-side id. Raises ``EngineClosedError`` once
        the engine was closed."""
        engine_id = self.ids.engine_id(request_id)
        task = self.thread.spawn(
            pump, self.engine, request_id, engine_id, prompt, params, options, deliver
        )
        return task, engine_id

    def retire(self, request_id: str) -> None:
        """The caller aborted ``request_id``: a later request with it gets a fresh engine id."""
        self.ids.retire(request_id)

    def close(self) -> None:
        """Stop the engine and its threads (idempotent)."""
        self._finalizer()
