"""SSE responses: the keep-alive comment of an idle stream (``--sse-keep-alive-interval``),
driven through the ASGI interface with plain calls; nothing is timed."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from actorllm.entrypoints.openai.app import AppSettings
from actorllm.entrypoints.openai.app.lifespan import serving_context, serving_defaults
from actorllm.entrypoints.openai.sse import DONE, KEEP_ALIVE, Emit, SSEResponse
from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import FakeEngine


async def _serve(response: SSEResponse, kept_alive: anyio.Event | None = None) -> list[bytes]:
    bodies: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            bodies.append(message["body"])
            if message["body"] == KEEP_ALIVE and kept_alive is not None:
                kept_alive.set()

    async def receive() -> dict[str, Any]:
        await anyio.sleep_forever()
        raise AssertionError

    with anyio.fail_after(10):
        await response({"type": "http"}, receive, send)
    return bodies


@pytest.mark.anyio
async def test_an_idle_stream_sends_keep_alive_comments_between_events() -> None:
    kept_alive = anyio.Event()

    async def producer(emit: Emit) -> None:
        await emit({"n": 1})
        await kept_alive.wait()  # idle until the keep-alive comment went out
        await emit({"n": 2})

    bodies = await _serve(SSEResponse(producer, keep_alive_s=0.01), kept_alive)
    assert bodies[0] == b'data: {"n":1}\n\n' and bodies[-1] == DONE
    events = [b for b in bodies if b != KEEP_ALIVE]
    assert events == [b'data: {"n":1}\n\n', b'data: {"n":2}\n\n', DONE]
    assert bodies.index(KEEP_ALIVE) == 1


@pytest.mark.anyio
async def test_without_an_interval_no_comment_is_sent() -> None:
    async def producer(emit: Emit) -> None:
        await emit({"n": 1})
        await anyio.sleep(0.05)
        await emit({"n": 2})

    assert KEEP_ALIVE not in await _serve(SSEResponse(producer))


def test_the_flag_reaches_the_chat_and_completion_streams_defaults() -> None:
    assert serving_defaults(AppSettings(sse_keep_alive_interval=15)).sse_keep_alive_s == 15
    assert serving_defaults(AppSettings()).sse_keep_alive_s == 0
    with pytest.raises(ValueError, match="--sse-keep-alive-interval"):
        AppSettings(sse_keep_alive_interval=-1)


@pytest.mark.anyio
async def test_renderer_num_workers_sizes_the_input_work_limiter() -> None:
    ctx = serving_context(FakeEngine(), AppSettings(renderer_num_workers=3))  # type: ignore[arg-type]
    assert ctx.input_limiter.total_tokens == 3
    with pytest.raises(ValueError, match="--renderer-num-workers"):
        AppSettings(renderer_num_workers=0)


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_completion_and_chat_streams_keep_alive_over_http(path: str) -> None:
    # Tokens come 0.2 s apart, comments are due every 0.01 s of idleness.
    srv = start_server(FakeEngine(token_delay_s=0.2), sse_keep_alive_interval=0.01)
    try:
        body: dict[str, Any] = {"model": "fake-model", "max_tokens": 2, "stream": True}
        if path.endswith("chat/completions"):
            body["messages"] = [{"role": "user", "content": "hi"}]
        else:
            body["prompt"] = "hi"
        raw = httpx.post(srv.url + path, json=body, timeout=30).content
    finally:
        srv.stop()
    assert KEEP_ALIVE in raw and raw.endswith(DONE)
    events = [e for e in raw.split(b"\n\n") if e.startswith(b"data: {")]
    assert len(events) >= 2
