"""Streaming over HTTP: one SSE event per token for every concurrent stream, on trio and
asyncio; a client that stops reading is merged alone and delays nobody.

The real actor engine on a scripted model whose vocabulary is twice the tokenizer's, so
about half of its tokens decode to no text: those are events too (vLLM sends them, and
streaming clients time every token by its event). Counted, not timed.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from actorllm.entrypoints.openai.app import AppSettings, build_app
from actorllm.testing import ScriptedModel, open_test_engine
from actorllm.testing.engine_harness import demo_tokenizer
from tests.entrypoints.server_thread import ServerThread

TOKENS = 24


@pytest.fixture(scope="module", params=["trio", "asyncio"])
def server(request: pytest.FixtureRequest) -> Iterator[ServerThread]:
    tok = demo_tokenizer()

    def engine() -> Any:
        model = ScriptedModel(
            vocab_size=2 * len(tok), eos_token_id=tok.eos_token_id, step_delay_s=0.005
        )
        return open_test_engine(model=model, tokenizer=tok, max_num_seqs=64, num_blocks=1024)

    app = build_app(engine, AppSettings(log_interval_s=0))
    # 64 KiB of kernel buffer per connection: a client that stops reading fills it
    srv = ServerThread(app, worker_class=request.param, send_buffer_bytes=1 << 16)
    srv.start()
    yield srv
    srv.stop()
    assert srv.error is None


def _request(path: str, body: dict[str, Any]) -> bytes:
    data = json.dumps({"model": "scripted", "stream": True, "ignore_eos": True, **body}).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    return head.encode() + data


def _body(raw: bytes) -> bytes:
    """The body of an HTTP/1.1 response sent with chunked transfer encoding."""
    rest, body = raw.split(b"\r\n\r\n", 1)[1], b""
    while rest:
        size, rest = rest.split(b"\r\n", 1)
        n = int(size, 16)
        body, rest = body + rest[:n], rest[n + 2 :]
    return body


def _events(raw: bytes) -> list[dict[str, Any]]:
    """The JSON events of an SSE response."""
    body = _body(raw)
    assert body.endswith(b"data: [DONE]\n\n")
    return [json.loads(e[6:]) for e in body.split(b"\n\n") if e.startswith(b"data: {")]


async def _stream(port: int, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    async with await anyio.connect_tcp("127.0.0.1", port) as conn:
        await conn.send(_request(path, body))
        raw = b""
        while True:
            try:
                raw += await conn.receive()
            except anyio.EndOfStream:
                break
    assert raw.startswith(b"HTTP/1.1 200")
    return _events(raw)


def _run(port: int, jobs: list[tuple[str, dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    results: list[list[dict[str, Any]]] = [[] for _ in jobs]

    async def one(i: int, path: str, body: dict[str, Any]) -> None:
        results[i] = await _stream(port, path, body)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for i, (path, body) in enumerate(jobs):
                tg.start_soon(one, i, path, body)

    anyio.run(main, backend="trio")
    return results


def _running(srv: ServerThread) -> float:
    for line in httpx.get(srv.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("actorllm:num_requests_running"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no actorllm:num_requests_running in /metrics")


USAGE = {"stream_options": {"include_usage": True}}


def test_sixteen_streams_each_get_one_event_per_token(server: ServerThread) -> None:
    jobs = [
        ("/v1/completions", {"prompt": f"stream {i}", "max_tokens": TOKENS, **USAGE})
        for i in range(16)
    ]
    empty = 0
    for events in _run(server.port, jobs):
        tokens = [e for e in events if e["choices"]]
        assert len(tokens) == TOKENS  # one event per token, none merged
        assert events[-1]["usage"]["completion_tokens"] == TOKENS
        assert tokens[-1]["choices"][0]["finish_reason"] == "length"
        empty += sum(1 for e in tokens if e["choices"][0]["text"] == "")
    assert empty > 0  # tokens with no text were sent as events too


def test_chat_streams_each_get_one_event_per_token(server: ServerThread) -> None:
    jobs = [
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": f"hi {i}"}], "max_tokens": TOKENS},
        )
        for i in range(8)
    ]
    for events in _run(server.port, jobs):
        deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
        assert deltas[0].get("role") == "assistant"
        assert len(deltas) == 1 + TOKENS  # the role, then one event per token
        assert all("content" in d for d in deltas[1:])


def test_a_client_that_stops_reading_delays_nobody(server: ServerThread) -> None:
    # A client that reads nothing until its request has ended, with a tiny receive buffer
    # and ~0.9 MB of events (4 choices, 20 logprobs a token): the connection's buffers
    # fill, its handler waits to send, and its outputs are merged while the others stream
    # one event per token.
    stalled = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect(("127.0.0.1", server.port))
    long = 400
    stalled.sendall(
        _request(
            "/v1/completions",
            {"prompt": "stalled", "max_tokens": long, "logprobs": 20, "n": 4, "seed": 1},
        )
    )
    try:
        jobs = [
            ("/v1/completions", {"prompt": f"reader {i}", "max_tokens": TOKENS}) for i in range(8)
        ]
        for events in _run(server.port, jobs):
            assert len([e for e in events if e["choices"]]) == TOKENS
        deadline = time.monotonic() + 60
        while _running(server) and time.monotonic() < deadline:  # the stalled one ends
            time.sleep(0.05)
        raw = b""
        while chunk := stalled.recv(1 << 16):
            raw += chunk
    finally:
        stalled.close()
    events = [e for e in _events(raw) if e["choices"]]
    assert sum(len(e["choices"][0]["logprobs"]["tokens"]) for e in events) == 4 * long
    assert len(events) < 4 * long  # what it did not read was merged, for it alone


def test_long_prompts_stream_after_tokenizing_off_the_loop(server: ServerThread) -> None:
    long = "a fairly long prompt " * 500  # past OFF_LOOP_CHARS: tokenized on a thread
    jobs = [
        ("/v1/completions", {"prompt": long, "max_tokens": 8, "truncate_prompt_tokens": 64}),
        (
            "/v1/chat/completions",
            {
                "messages": [{"role": "user", "content": long}],
                "max_tokens": 8,
                "truncate_prompt_tokens": 64,
            },
        ),
    ]
    completion, chat = _run(server.port, jobs)
    assert len([e for e in completion if e["choices"]]) == 8
    assert len([e for e in chat if e["choices"]]) == 1 + 8
