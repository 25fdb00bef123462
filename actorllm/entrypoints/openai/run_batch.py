"""OpenAI's batch file format, served by the HTTP server's own handlers.

Each input line is ``{"custom_id", "method", "url", "body"}``; each output line is vLLM's
``BatchRequestOutput``, in the order of the input::

    {"id": "batch-…", "custom_id": "a",
     "response": {"status_code": 200, "request_id": "batch-req-…", "body": {...}},
     "error": null}

A line's body goes through :func:`decode_request` and the route's serving function
(completions, chat, and on a pooling model embeddings, score and rerank) with the
server's :class:`ServingContext`, so ``body`` is the
bytes ``POST url`` answers (only ids and ``created`` differ). A line that fails, however it
fails (not JSON, an unknown ``url``, a 400 body, a dead engine), gets the status and the
error body the server would give, with ``"body": null``; the other lines run on. The
output's ``request_id`` names the engine request too (``cmpl-batch-req-…``, as a server
request's ``X-Request-Id`` does), unless the body names its own ``request_id``.

:func:`run_batch` runs every line concurrently on one engine (at most ``limit`` at once,
so a large file does not flood the engine's waiting queue; a line the engine refuses as
overloaded anyway waits its ``Retry-After`` and tries again).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import anyio
import msgspec
from starlette.responses import Response

from actorllm.engine.errors import EngineOverloadedError
from actorllm.entrypoints.openai import serving_pooling as pooling
from actorllm.entrypoints.openai.errors import APIError, from_validation_error, to_api_error
from actorllm.entrypoints.openai.fields import decode_request
from actorllm.entrypoints.openai.protocol import pooling as pp
from actorllm.entrypoints.openai.protocol.chat_request import ChatCompletionRequest
from actorllm.entrypoints.openai.protocol.completion import CompletionRequest
from actorllm.entrypoints.openai.protocol.error_body import ErrorResponse
from actorllm.entrypoints.openai.serving_chat import create_chat_completion
from actorllm.entrypoints.openai.serving_common import ServingContext
from actorllm.entrypoints.openai.serving_completion import create_completion

request_log = logging.getLogger("actorllm.requests")  # the server's request log

# A serving function as the routes call it: (context, request, ASGI receive) -> response.
Serve = Callable[[ServingContext, Any, Any], Awaitable[Response]]


def _pooling(serve: Callable[[ServingContext, Any], Awaitable[Response]]) -> Serve:
    """A pooling route's serving function (it reads no ``receive``: nothing streams)."""
    return lambda ctx, req, _receive: serve(ctx, req)


# {url: (request struct, serving function)}: the server's routes vLLM's run-batch takes.
# A pooling URL on a generative model (or the reverse) is the server's 400 naming `model`.
ROUTES: dict[str, tuple[type[msgspec.Struct], Serve]] = {
    "/v1/completions": (CompletionRequest, create_completion),
    "/v1/chat/completions": (ChatCompletionRequest, create_chat_completion),
    "/v1/embeddings": (pp.EmbeddingRequest, _pooling(pooling.create_embedding)),
    **dict.fromkeys(["/score", "/v1/score"], (pp.ScoreRequest, _pooling(pooling.create_score))),
    **dict.fromkeys(
        ["/rerank", "/v1/rerank", "/v2/rerank"],
        (pp.RerankRequest, _pooling(pooling.create_rerank)),
    ),
}


class BatchRequestInput(msgspec.Struct):
    """One input line. ``body`` stays raw: it is decoded exactly as a request body is."""

    custom_id: str
    method: str
    url: str
    body: msgspec.Raw


class BatchResponseData(msgspec.Struct):
    status_code: int
    request_id: str
    body: msgspec.Raw | None = None  # the response body, as the server sends it


class BatchRequestOutput(msgspec.Struct):
    """One output line (vLLM's ``BatchRequestOutput``, field for field)."""

    id: str
    custom_id: str | None  # None only for a line that is not a JSON object with one
    response: BatchResponseData | None
    error: ErrorResponse | None  # the server's error body, when status_code is not 200


async def _never_disconnects() -> NoReturn:
    """The ASGI ``receive`` of a client that stays to the end (a batch line)."""
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


def _custom_id_of(line: bytes) -> str | None:
    """The line's ``custom_id``, if it can be read at all (for a line that is invalid)."""
    try:
        raw = msgspec.json.decode(line)
    except msgspec.DecodeError:
        return None
    value = raw.get("custom_id") if isinstance(raw, dict) else None
    return value if isinstance(value, str) else None


def _parse(line: bytes, number: int) -> BatchRequestInput:
    try:
        return msgspec.json.decode(line, type=BatchRequestInput)
    except msgspec.ValidationError as exc:  # JSON, not a batch line: name the field
        error = from_validation_error(exc)
        raise APIError(400, f"Line {number}: {error.message}", error.param) from None
    except msgspec.DecodeError as exc:
        raise APIError(400, f"Line {number} is not valid JSON: {exc}") from None


def _route(item: BatchRequestInput) -> tuple[type[msgspec.Struct], Serve]:
    """The route the server would take, or the error it would answer (404, 405)."""
    if item.url not in ROUTES:
        raise APIError(404, f"Not found: {item.url}")
    if item.method.upper() != "POST":
        raise APIError(405, f"Method {item.method} not allowed.")
    return ROUTES[item.url]


async def serve_line(
    ctx: ServingContext, line: bytes, number: int, *, log_requests: bool = False
) -> BatchRequestOutput:
    """One line's output; never raises for anything the line or the engine did.
    ``log_requests`` (``--enable-log-requests``): logged as the server logs a request."""
    request_id = f"batch-req-{uuid.uuid4().hex}"
    if log_requests:
        text = line.decode("utf-8", "replace")[: ctx.defaults.max_log_len]
        request_log.info("request %s: line %d %s", request_id, number, text)
    output = await _output_of(ctx, line, number, request_id)
    if log_requests and output.response is not None:
        request_log.info("request %s: status %d", request_id, output.response.status_code)
    return output


async def _output_of(
    ctx: ServingContext, line: bytes, number: int, request_id: str
) -> BatchRequestOutput:
    custom_id: str | None = None
    try:
        item = _parse(line, number)
        custom_id = item.custom_id
        kind, serve = _route(item)
        req: Any = decode_request(item.body, kind)
        if getattr(req, "stream", False):  # vLLM's words: a batch line has nobody to stream to
            raise APIError(400, "Request must not be sent in stream mode.", "stream")
        if req.request_id is None:
            req = msgspec.structs.replace(req, request_id=request_id)
        response = await _served(ctx, serve, req)
    except Exception as exc:
        if custom_id is None:
            custom_id = _custom_id_of(line)
        error = to_api_error(exc, engine_dead=ctx.is_dead())
        data = BatchResponseData(status_code=error.status, request_id=request_id)
        return BatchRequestOutput(_output_id(), custom_id, data, error.body())
    body = msgspec.Raw(bytes(response.body))
    data = BatchResponseData(status_code=response.status_code, request_id=request_id, body=body)
    return BatchRequestOutput(_output_id(), custom_id, data, None)


async def _served(ctx: ServingContext, serve: Serve, req: Any) -> Response:
    """``serve(ctx, req)``; a refusal for overload (only with ``max_waiting_requests``) is
    retried after its ``Retry-After``, as a batch client would."""
    while True:
        try:
            return await serve(ctx, req, _never_disconnects)
        except EngineOverloadedError as exc:
            await anyio.sleep(exc.retry_after_s)


def _output_id() -> str:
    return f"batch-{uuid.uuid4().hex}"


@dataclass(slots=True)
class InOrder:
    """Hands output lines to ``write`` in input order as soon as each one's turn comes, so
    only the lines that finished ahead of a slow one are held."""

    write: Callable[[bytes], object]
    held: dict[int, bytes] = field(default_factory=dict)  # {index: encoded line}
    next: int = 0  # the index written next

    def put(self, index: int, line: bytes) -> None:
        self.held[index] = line
        while self.next in self.held:
            self.write(self.held.pop(self.next))
            self.next += 1


@dataclass(frozen=True, slots=True)
class BatchSummary:
    lines: int
    failed: int  # lines whose status_code is not 200


async def run_batch(
    ctx: ServingContext,
    lines: Sequence[bytes],
    write: Callable[[bytes], object],
    *,
    limit: int,
    on_done: Callable[[], None] = lambda: None,
    log_requests: bool = False,
) -> BatchSummary:
    """Serve ``lines`` (blank ones skipped) concurrently, at most ``limit`` at once, and
    ``write`` each output line (with its newline) in input order; ``on_done`` after each
    line (the progress bar). Returns when every line is written."""
    todo = [(number, line) for number, line in enumerate(lines, 1) if line.strip()]
    out = InOrder(write)
    slots = anyio.Semaphore(max(1, limit))
    encoder = msgspec.json.Encoder()
    failed = 0

    async def one(index: int, number: int, line: bytes) -> None:
        nonlocal failed
        try:
            result = await serve_line(ctx, line, number, log_requests=log_requests)
        finally:
            slots.release()
        failed += result.error is not None
        out.put(index, encoder.encode(result) + b"\n")
        on_done()

    async with anyio.create_task_group() as tg:
        for index, (number, line) in enumerate(todo):
            await slots.acquire()  # before the task starts: at most `limit` tasks at a time
            tg.start_soon(one, index, number, line)
    return BatchSummary(lines=len(todo), failed=failed)


if __name__ == "__main__":  # vLLM's older form: python -m vllm.entrypoints.openai.run_batch
    import sys

    from actorllm.entrypoints.cli import main

    sys.exit(main(["run-batch", *sys.argv[1:]]))
