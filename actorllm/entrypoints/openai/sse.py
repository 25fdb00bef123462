"""Server-sent events as OpenAI streams them: ``data: {json}\\n\\n`` ... ``data: [DONE]\\n\\n``.

:class:`SSEResponse` is a plain ASGI response driven by a *producer* coroutine (not an async
generator, so the producer may open task groups). It watches ``receive`` for
``http.disconnect`` the whole time and cancels the producer when the client goes away; the
producer's cleanup (``streams.pump``) then closes the engine iterators, which aborts the
requests and frees their KV blocks. An exception in the producer after the response started
becomes one ``data: {"error": ...}`` event, followed by ``[DONE]``.

With ``keep_alive_s`` (``--sse-keep-alive-interval``), a stream that sent nothing for that
long (queued, in prefill, between tokens) sends the SSE comment ``: keep-alive``, which
clients skip, so a proxy's read timeout does not close it (vLLM's comment and rule).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec
from starlette.responses import Response

from actorllm.entrypoints.openai.errors import to_api_error
from actorllm.entrypoints.openai.streams import wait_for_disconnect

DONE = b"data: [DONE]\n\n"
KEEP_ALIVE = b": keep-alive\n\n"
Emit = Callable[[Any], Awaitable[None]]
Producer = Callable[[Emit], Awaitable[None]]

_encoder = msgspec.json.Encoder()


def sse_event(payload: Any) -> bytes:
    """One SSE event carrying ``payload`` encoded as JSON."""
    return b"data: " + _encoder.encode(payload) + b"\n\n"


class SSEResponse(Response):
    """Stream what ``producer(emit)`` emits, one event per ``emit(struct_or_dict)`` call.

    ``is_dead`` tells the error mapping whether the engine died (then errors read as 503).
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        producer: Producer,
        *,
        is_dead: Callable[[], bool] = lambda: False,
        named: bool = False,
        keep_alive_s: float = 0.0,
    ) -> None:
        super().__init__(status_code=200)
        self._producer = producer
        self._is_dead = is_dead
        self._keep_alive_s = keep_alive_s  # 0: no keep-alive comments
        # The Responses API's form (vLLM's): ``event: <payload's type>`` before each
        # ``data:``, and no ``[DONE]`` (``response.completed`` ends the stream).
        self._named = named

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                    (b"x-accel-buffering", b"no"),
                ],
            }
        )

        send_body = _KeepAlive(send, self._keep_alive_s) if self._keep_alive_s else None

        async def emit(payload: Any) -> None:
            body = sse_event(payload)
            if self._named and isinstance(payload, dict) and "type" in payload:
                body = b"event: " + str(payload["type"]).encode() + b"\n" + body
            if send_body is not None:
                await send_body(body)
            else:
                await send({"type": "http.response.body", "body": body, "more_body": True})

        disconnected = False

        async def watch(cancel: anyio.CancelScope) -> None:
            nonlocal disconnected
            await wait_for_disconnect(receive)
            disconnected = True
            cancel.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch, tg.cancel_scope)
            if send_body is not None:
                tg.start_soon(send_body.run)
            try:
                await self._producer(emit)
            except Exception as exc:
                await emit(to_api_error(exc, engine_dead=self._is_dead()).body())
            tg.cancel_scope.cancel()
        # The last send ends the response, and the server may close the connection inside
        # it (a `Connection: close` client), which reports http.disconnect: sent inside the
        # task group, the watcher's cancel interrupted that close and leaked the socket.
        if not disconnected:
            last = b"" if self._named else DONE
            await send({"type": "http.response.body", "body": last, "more_body": False})


class _KeepAlive:
    """Sends a stream's chunks and, between them, a keep-alive comment whenever
    ``interval_s`` passed since the last one; ``run`` is the task that sends the comments
    (cancelled with the response's task group). Sends are serialized by a lock, so a
    comment never lands inside an event."""

    def __init__(self, send: Any, interval_s: float) -> None:
        self._send = send
        self._interval_s = interval_s
        self._last = anyio.current_time()  # when something was last sent
        self._lock = anyio.Lock()

    async def __call__(self, body: bytes) -> None:
        async with self._lock:
            await self._send({"type": "http.response.body", "body": body, "more_body": True})
        self._last = anyio.current_time()

    async def run(self) -> None:
        while True:
            await anyio.sleep_until(self._last + self._interval_s)
            if anyio.current_time() - self._last >= self._interval_s:
                await self(KEEP_ALIVE)
