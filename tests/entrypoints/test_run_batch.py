"""The batch format over the fake engine: output shape and order, a bad line is an error
entry (never a crash), bodies equal the HTTP server's, lines run concurrently (bounded),
an overloaded engine is retried."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from actorllm.core.outputs import RequestOutput
from actorllm.core.sampling_params import SamplingParams
from actorllm.engine.errors import EngineOverloadedError
from actorllm.entrypoints.openai.app.lifespan import serving_context
from actorllm.entrypoints.openai.app.settings import AppSettings
from actorllm.entrypoints.openai.run_batch import run_batch
from tests.entrypoints.fake_engine import FakeEngine
from tests.entrypoints.server_thread import ServerThread

pytestmark = pytest.mark.anyio

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
COMPLETION = {"model": "fake-model", "prompt": "Hello", "max_tokens": 4}


def line(custom_id: Any, url: str, body: Any, method: str = "POST") -> bytes:
    return json.dumps({"custom_id": custom_id, "method": method, "url": url, "body": body}).encode()


async def run(
    engine: FakeEngine, lines: list[bytes], limit: int = 64, **settings: Any
) -> list[Any]:
    written: list[bytes] = []
    app = AppSettings(log_interval_s=0, **settings)
    log = app.enable_log_requests
    summary = await run_batch(
        serving_context(engine, app), lines, written.append, limit=limit, log_requests=log
    )
    assert all(w.endswith(b"\n") and w.count(b"\n") == 1 for w in written)
    outputs = [json.loads(w) for w in written]
    assert summary.lines == len(outputs)
    assert summary.failed == sum(o["error"] is not None for o in outputs)
    return outputs


def without_ids(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in ("id", "created")}


async def test_chat_and_completion_lines_in_input_order() -> None:
    engine = FakeEngine()
    lines = [
        line("chat", "/v1/chat/completions", CHAT),
        b"   ",  # blank lines are skipped, as vLLM does
        line("cmpl", "/v1/completions", {**COMPLETION, "max_tokens": 12}),
        line("short", "/v1/completions", {**COMPLETION, "max_tokens": 1}),
    ]
    chat, cmpl, short = await run(engine, lines)
    assert [o["custom_id"] for o in (chat, cmpl, short)] == ["chat", "cmpl", "short"]
    for o in (chat, cmpl, short):
        assert list(o) == ["id", "custom_id", "response", "error"]  # vLLM's BatchRequestOutput
        assert list(o["response"]) == ["status_code", "request_id", "body"]
        assert o["response"]["status_code"] == 200 and o["error"] is None
    assert chat["response"]["body"]["object"] == "chat.completion"
    assert chat["response"]["body"]["choices"][0]["message"]["content"] == " the quick brown"
    assert cmpl["response"]["body"]["usage"]["completion_tokens"] == 12
    assert short["response"]["body"]["choices"][0]["text"] == " the"
    # The line's request id is the engine's: the body's id carries it.
    rid = cmpl["response"]["request_id"]
    assert cmpl["response"]["body"]["id"] == f"cmpl-{rid}"
    assert len({o["id"] for o in (chat, cmpl, short)}) == 3
    assert sorted(engine.finished) == sorted(
        [
            f"chatcmpl-{chat['response']['request_id']}",
            f"cmpl-{rid}",
            f"cmpl-{short['response']['request_id']}",
        ]
    )


async def test_a_bad_line_is_an_error_entry_and_the_others_run() -> None:
    lines = [
        b"{not json",
        line("ok", "/v1/completions", COMPLETION),
        line("badfield", "/v1/completions", {**COMPLETION, "max_tokens": -1}),
        line("unknown-url", "/v1/edits", COMPLETION),
        line("embed", "/v1/embeddings", {"model": "fake-model", "input": "x"}),
        line("get", "/v1/completions", COMPLETION, method="GET"),
        line("stream", "/v1/completions", {**COMPLETION, "stream": True}),
        line("model", "/v1/chat/completions", {**CHAT, "model": "nope"}),
        line("refused", "/v1/completions", {**COMPLETION, "suffix": "x"}),
        json.dumps({"custom_id": "nobody", "method": "POST", "url": "/v1/completions"}).encode(),
        line(7, "/v1/completions", COMPLETION),
        b"[1, 2]",
    ]
    outs = await run(FakeEngine(), lines)
    by_id = {o["custom_id"]: o for o in outs if o["custom_id"] is not None}
    assert by_id["ok"]["response"]["status_code"] == 200

    def status(o: dict[str, Any]) -> tuple[int, str | None]:
        assert o["response"]["body"] is None
        err = o["error"]["error"]
        assert err["code"] == o["response"]["status_code"]
        return err["code"], err["param"]

    assert status(outs[0]) == (400, None) and outs[0]["custom_id"] is None
    assert "Line 1 is not valid JSON" in outs[0]["error"]["error"]["message"]
    assert status(by_id["badfield"]) == (400, "max_tokens")
    assert status(by_id["unknown-url"]) == (404, None)
    assert by_id["unknown-url"]["error"]["error"]["message"] == "Not found: /v1/edits"
    assert status(by_id["embed"]) == (400, "model")  # a generative model: no embeddings
    assert status(by_id["get"]) == (405, None)
    assert status(by_id["stream"]) == (400, "stream")
    assert status(by_id["model"]) == (404, "model")
    assert status(by_id["refused"]) == (400, "suffix")
    assert status(by_id["nobody"]) == (400, "body")
    # A custom_id that is not a string: named as the field at fault, no custom_id to echo.
    assert status(outs[10]) == (400, "custom_id") and outs[10]["custom_id"] is None
    assert status(outs[11]) == (400, None) and outs[11]["custom_id"] is None
    assert [o["custom_id"] for o in outs[1:10]] == [
        "ok", "badfield", "unknown-url", "embed", "get", "stream", "model", "refused", "nobody",
    ]  # fmt: skip


async def test_bodies_equal_the_servers(engine: FakeEngine, server: ServerThread) -> None:
    """The server's engine and one line per body: the same answer, ids and time aside."""
    bodies = {
        "/v1/completions": {**COMPLETION, "n": 2, "logprobs": 1, "echo": True, "stop": ["fox"]},
        "/v1/chat/completions": {**CHAT, "logprobs": True, "top_logprobs": 2},
    }
    bad = {**COMPLETION, "temperature": -1}
    lines = [line(url, url, body) for url, body in bodies.items()] + [
        line("bad", "/v1/completions", bad)
    ]
    outs = await run(engine, lines)
    async with httpx.AsyncClient(base_url=server.url) as client:
        for out, (url, body) in zip(outs, [*bodies.items(), ("/v1/completions", bad)], strict=True):
            http = await client.post(url, json=body)
            assert out["response"]["status_code"] == http.status_code
            if http.status_code == 200:
                assert without_ids(out["response"]["body"]) == without_ids(http.json())
            else:
                assert out["error"] == http.json()


class GatedEngine(FakeEngine):
    """Holds every request until ``gate`` are open at once: a batch that ran its lines one
    at a time would wait here forever."""

    def __init__(self, gate: int) -> None:
        super().__init__()
        self.gate = gate
        self.in_flight = 0
        self.peak = 0
        self._all_in: anyio.Event | None = None

    async def generate(  # type: ignore[override]
        self,
        prompt: str | dict[str, Any],
        sampling_params: SamplingParams,
        request_id: str | None = None,
        priority: int = 0,
        *,
        reasoning_ended: bool | None = None,
    ) -> AsyncIterator[RequestOutput]:
        if self._all_in is None:
            self._all_in = anyio.Event()
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        if self.in_flight >= self.gate:
            self._all_in.set()
        try:
            await self._all_in.wait()
            async for out in super().generate(prompt, sampling_params, request_id, priority):
                yield out
        finally:
            self.in_flight -= 1


async def test_every_line_is_in_flight_at_once() -> None:
    engine = GatedEngine(gate=6)
    lines = [line(str(i), "/v1/completions", COMPLETION) for i in range(6)]
    with anyio.fail_after(20):
        outs = await run(engine, lines)
    assert engine.peak == 6
    assert [o["custom_id"] for o in outs] == [str(i) for i in range(6)]


async def test_the_limit_bounds_the_lines_in_flight() -> None:
    engine = GatedEngine(gate=2)
    lines = [line(str(i), "/v1/completions", COMPLETION) for i in range(7)]
    outs = await run(engine, lines, limit=2)
    assert engine.peak == 2
    assert all(o["response"]["status_code"] == 200 for o in outs)


class OverloadedOnce(FakeEngine):
    """Refuses each request id's first try as overloaded, as ``max_waiting_requests`` does."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = 0

    async def generate(  # type: ignore[override]
        self,
        prompt: str | dict[str, Any],
        sampling_params: SamplingParams,
        request_id: str | None = None,
        priority: int = 0,
        *,
        reasoning_ended: bool | None = None,
    ) -> AsyncIterator[RequestOutput]:
        if self.refused < 2:
            self.refused += 1
            raise EngineOverloadedError("overloaded", retry_after_s=0.01)
        async for out in super().generate(prompt, sampling_params, request_id, priority):
            yield out


async def test_an_overloaded_engine_is_retried() -> None:
    engine = OverloadedOnce()
    outs = await run(engine, [line("a", "/v1/completions", COMPLETION)] * 2)
    assert engine.refused == 2
    assert [o["response"]["status_code"] for o in outs] == [200, 200]


async def test_a_dead_engine_is_503_per_line() -> None:
    engine = FakeEngine()
    engine.is_dead = True
    (out,) = await run(engine, [line("a", "/v1/completions", COMPLETION)])
    assert out["response"]["status_code"] == 503 and out["custom_id"] == "a"


async def test_response_role_and_frontend_settings_apply() -> None:
    lines = [line("c", "/v1/chat/completions", CHAT)]
    (out,) = await run(FakeEngine(), lines, response_role="robot")
    assert out["response"]["body"]["choices"][0]["message"]["role"] == "robot"


async def test_log_requests_logs_each_line_and_its_status(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="actorllm.requests")
    lines = [line("a", "/v1/completions", COMPLETION), b"nope"]
    ok, bad = await run(FakeEngine(), lines, enable_log_requests=True, max_log_len=20)
    ids = ok["response"]["request_id"], bad["response"]["request_id"]
    text = caplog.text
    assert (
        f"request {ids[0]}: line 1 " + line("a", "/v1/completions", COMPLETION).decode()[:20]
        in text
    )
    assert f"request {ids[0]}: status 200" in text and f"request {ids[1]}: status 400" in text
