"""The caller's side of :class:`AsyncLLM`: its asyncio loop, fed from the engine's thread.

The engine's loop posts each item of a request to the caller's loop (``LoopPoster``:
``call_soon_threadsafe``), which puts it into a memory stream (:func:`put`);
:func:`read_outputs` reads them back. :func:`call_on_engine` awaits one call on the
engine's loop from the caller's.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from concurrent.futures import Future
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from actorllm.compat.vllm.bridge import END
from actorllm.compat.vllm.engine_thread import EngineThread
from actorllm.core.outputs import RequestOutput
from actorllm.core.sampling_params import RequestOutputKind
from actorllm.engine.api.step_outputs import merge_outputs
from actorllm.worker.worker_thread import LoopPoster

_NOTHING = object()


def put(send: MemoryObjectSendStream[object], item: object) -> None:
    """On the caller's loop: one item into a request's stream (dropped once the caller
    left it)."""
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        send.send_nowait(item)


async def read_outputs(
    receive: MemoryObjectReceiveStream[object], kind: RequestOutputKind
) -> AsyncGenerator[RequestOutput, None]:
    """On the caller's loop: one request's outputs as the pump posted them, until its final
    output or :data:`END`; raises the error that ended it. A caller that fell behind reads
    what is already there merged into one output."""
    held: object = _NOTHING  # END or an error, read while merging
    while True:
        item = held if held is not _NOTHING else await receive.receive()
        held = _NOTHING
        while isinstance(item, RequestOutput) and not item.finished:
            try:
                nxt = receive.receive_nowait()
            except anyio.WouldBlock:
                break
            if not isinstance(nxt, RequestOutput):
                held = nxt
                break
            item = merge_outputs(item, nxt, kind)
        if item is END:  # the stream ended without a final output
            return
        if isinstance(item, BaseException):
            raise item
        assert isinstance(item, RequestOutput)
        yield item
        if item.finished:
            return


async def call_on_engine(
    thread: EngineThread, fn: Callable[..., Awaitable[Any]], *args: Any
) -> Any:
    """``await fn(*args)`` on the engine's loop, awaited on the caller's; cancelling the
    caller cancels it."""
    poster = LoopPoster()
    send, receive = anyio.create_memory_object_stream[Future[Any]](1)
    future = thread.spawn(fn, *args)
    future.add_done_callback(lambda f: poster.post(put, send, f))
    try:
        with send, receive:
            done = await receive.receive()
    except BaseException:
        future.cancel()
        raise
    return done.result()
