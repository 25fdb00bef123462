"""Driving engine output iterators for one HTTP request: prime, pump, close, watch the client.

An HTTP request may fan out into several engine requests (a completion with a batch of
prompts), each an ``AsyncIterator[RequestOutput]``. The engine raises input errors on the
first ``anext()``, so :func:`prime_all` fetches every first output *before* the response
starts: a bad prompt is a 400, not a broken stream. :func:`pump` then feeds all outputs to
one callback, concurrently across prompts, serialized for the callback.

Closing an engine iterator aborts its request (its KV blocks are freed). Every path out of
here closes every iterator, in a shielded scope so that a cancellation (the client went
away) cannot skip the abort. No task group here spans a ``yield``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio

from actorllm.core.outputs import RequestOutput

_CLOSE_TIMEOUT_S = 5.0
T = TypeVar("T")


class ClientDisconnected(Exception):
    """The HTTP client went away before the response was complete."""


@dataclass(frozen=True, slots=True)
class PrimedStream:
    """An engine iterator whose first output has been fetched."""

    first: RequestOutput
    rest: AsyncIterator[RequestOutput]


async def close_quietly(it: AsyncIterator[Any]) -> None:
    """Close an async iterator (aborting its engine request), even inside a cancelled scope."""
    aclose = getattr(it, "aclose", None)
    if aclose is None:
        return
    with anyio.move_on_after(_CLOSE_TIMEOUT_S, shield=True):
        # The request is gone either way; an error while closing has nobody to report to.
        with contextlib.suppress(Exception):
            await aclose()


def first_leaf(exc: BaseException) -> BaseException:
    """The first non-group exception inside (possibly nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


async def prime_all(iters: list[AsyncIterator[RequestOutput]]) -> list[PrimedStream]:
    """Fetch the first output of every iterator, concurrently.

    Raises the first error (typically a 400-worthy ``ValueError`` from input validation)
    after closing every iterator. Blocks until every request produced its first output.
    """
    firsts: list[RequestOutput | None] = [None] * len(iters)
    errors: list[BaseException] = []

    async def prime(i: int) -> None:
        try:
            firsts[i] = await iters[i].__anext__()
        except StopAsyncIteration:
            errors.append(RuntimeError("the engine finished a request without any output"))
        except Exception as exc:
            errors.append(exc)

    try:
        async with anyio.create_task_group() as tg:
            for i in range(len(iters)):
                tg.start_soon(prime, i)
    except BaseException:
        await _close_all(iters)
        raise
    if errors:
        await _close_all(iters)
        raise errors[0]
    return [
        PrimedStream(first=first, rest=it) for first, it in zip(firsts, iters, strict=True) if first
    ]


async def pump(
    streams: list[PrimedStream], on_output: Callable[[int, RequestOutput], Awaitable[None]]
) -> None:
    """Call ``on_output(stream_index, output)`` for every output of every stream.

    Streams run concurrently; calls to ``on_output`` never overlap and keep each stream's
    order. Returns when all streams finished; on any error or cancellation every iterator is
    closed and the first error is raised (unwrapped from the task group's exception group).

    This runs once per token of every streamed response, so its switches count: one stream
    (``n=1``, most requests) is drained in the caller's task without a lock, and several
    share a lock taken without a yield when it is free (``fast_acquire``; on trio a plain
    acquire is a full reschedule per output).
    """
    if len(streams) == 1:
        await _drain(0, streams[0], on_output, None)
        return
    lock = anyio.Lock(fast_acquire=True)
    try:
        async with anyio.create_task_group() as tg:
            for i, stream in enumerate(streams):
                tg.start_soon(_drain, i, stream, on_output, lock)
    except BaseExceptionGroup as group:
        leaf = first_leaf(group)
        if isinstance(leaf, Exception):
            raise leaf from None
        raise


async def _drain(
    i: int,
    stream: PrimedStream,
    on_output: Callable[[int, RequestOutput], Awaitable[None]],
    lock: anyio.Lock | None,
) -> None:
    """``on_output`` for each of one stream's outputs (under ``lock`` when given), then the
    stream closed, however this ends."""
    try:
        out = stream.first
        while True:
            if lock is None:
                await on_output(i, out)
            else:
                async with lock:
                    await on_output(i, out)
            if out.finished:
                return
            try:
                out = await stream.rest.__anext__()
            except StopAsyncIteration:
                return
    finally:
        await close_quietly(stream.rest)


async def _close_all(iters: list[AsyncIterator[RequestOutput]]) -> None:
    for it in iters:
        await close_quietly(it)


async def wait_for_disconnect(receive: Callable[[], Awaitable[Any]]) -> None:
    """Return when the ASGI ``receive`` reports ``http.disconnect`` (call after the body)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def unless_disconnected(
    receive: Callable[[], Awaitable[Any]], fn: Callable[[], Awaitable[T]]
) -> T:
    """Run ``fn()``; if the client disconnects first, cancel it and raise ClientDisconnected.

    ``fn`` must close what it opened when cancelled (``pump`` and ``prime_all`` do), which is
    how a disconnected non-streaming request gets aborted.
    """
    result: list[T] = []
    gone = False

    async def watch(scope: anyio.CancelScope) -> None:
        nonlocal gone
        await wait_for_disconnect(receive)
        gone = True
        scope.cancel()

    async def run(scope: anyio.CancelScope) -> None:
        result.append(await fn())
        scope.cancel()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch, tg.cancel_scope)
            await run(tg.cancel_scope)
    except BaseExceptionGroup as group:
        leaf = first_leaf(group)
        if isinstance(leaf, Exception):
            raise leaf from None
        raise
    if gone and not result:
        raise ClientDisconnected()
    return result[0]
