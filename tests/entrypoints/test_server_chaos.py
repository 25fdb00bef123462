"""The server under faults (issue 18): while HTTP clients stream on loopback, the engine's
actors crash again and again. Every client gets its full answer (the same text as without
faults) or a typed error (an error event in its stream, or an OpenAI error body when it
failed before its first token), no connection is reset, ``/health`` answers 200
throughout, and ``/metrics`` counts the restarts."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from actorllm.entrypoints.openai.app import AppSettings, app_state, build_app
from actorllm.testing import inject_fault, open_test_engine
from actorllm.testing.chaos_plan import CrashPoint, Trigger
from tests.entrypoints.server_thread import ServerThread
from tests.entrypoints.test_server_metrics import sample

CLIENTS = 12
MAX_TOKENS = 12
# Two rounds of crashes over every actor and the model step, at points inside the traffic,
# and two hangs (an actor, a model step) for the watchdog and the step timeout.
CRASHES = [
    CrashPoint(actor, at)
    for actor, at in [
        ("router", 3),
        ("input_processor", 5),
        ("scheduler", 9),
        ("executor", 14),
        ("output_processor", 11),
        ("worker", 7),
        ("scheduler", 40),
        ("output_processor", 45),
        ("worker", 30),
    ]
] + [CrashPoint("scheduler", 60, hang=True), CrashPoint("worker", 45, hang=True)]


@pytest.fixture(params=["trio", "asyncio"])
def server(request: pytest.FixtureRequest) -> Iterator[ServerThread]:
    engine = lambda: open_test_engine(  # noqa: E731
        step_delay_s=0.002,
        max_restarts=1000,
        restart_window_s=1.0,
        block_size=8,
        actor_message_deadline_s=0.5,  # a hung actor is restarted
        step_timeout_s=0.5,  # so is the core, for a hung model step
    )
    app = build_app(engine, AppSettings(log_interval_s=0))
    srv = ServerThread(app, worker_class=request.param).start()
    yield srv
    srv.stop()
    assert srv.error is None


async def stream_one(client: httpx.AsyncClient, i: int) -> dict[str, Any]:
    """One streaming completion: its text and finish reason, or the error event it got."""
    body = {
        "prompt": f"client {i} asks " + "why " * (i % 4),
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "stream": True,
    }
    text, reason, error, done = "", None, None, False
    async with client.stream("POST", "/v1/completions", json=body) as r:
        if r.status_code != 200:  # failed before its first token: a typed error response
            error = json.loads(await r.aread())["error"]
            assert error["code"] == r.status_code in (500, 503)
            return {"text": "", "finish_reason": None, "error": error, "done": True}
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: ") :]
            if data == "[DONE]":
                done = True
                continue
            event = json.loads(data)
            if "error" in event:
                error = event["error"]
                continue
            text += event["choices"][0]["text"]
            reason = event["choices"][0]["finish_reason"] or reason
    return {"text": text, "finish_reason": reason, "error": error, "done": done}


async def stream_all(url: str) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = [{} for _ in range(CLIENTS)]
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as client:

        async def one(i: int) -> None:
            results[i] = await stream_one(client, i)

        async with anyio.create_task_group() as tg:
            for i in range(CLIENTS):
                tg.start_soon(one, i)
    return results


async def poll_health(url: str, stop: anyio.Event, codes: list[int]) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=10.0) as client:
        while not stop.is_set():
            codes.append((await client.get("/health")).status_code)
            await anyio.sleep(0.01)


def test_streaming_clients_survive_repeated_crashes(server: ServerThread) -> None:
    backend = server._settings.worker_class

    async def rounds() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[int]]:
        reference = await stream_all(server.url)
        engine = app_state(server.app).ctx.engine
        triggers = [Trigger(p) for p in CRASHES]
        for t in triggers:
            # The server's loop runs in another thread: appending a fault is one atomic
            # list append (and, for the model step, one attribute store) under the GIL.
            stall = (1.0 if t.point.actor == "worker" else math.inf) if t.point.hang else None
            inject_fault(engine, t.point.actor, when=t, stall_s=stall)
        codes: list[int] = []
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(poll_health, server.url, stop, codes)
            chaos = await stream_all(server.url)
            while not all(t.fired for t in triggers):  # late points: one more round
                chaos += await stream_all(server.url)
            stop.set()
        return reference, chaos, codes

    reference, chaos, codes = anyio.run(rounds, backend=backend)
    assert all(r["done"] and r["error"] is None for r in reference)
    assert all(r["finish_reason"] == "length" for r in reference)
    for i, got in enumerate(chaos):
        assert got["done"], "every stream ends with [DONE] (no reset connection)"
        want = reference[i % CLIENTS]
        if got["error"] is not None:  # a typed error event, never a broken stream
            assert set(got["error"]) >= {"message", "type", "code"}
        else:
            assert (got["text"], got["finish_reason"]) == (want["text"], "length")
    assert codes and set(codes) == {200}
    text = httpx.get(server.url + "/metrics").text
    restarts = sum(
        sample(text, "actorllm:actor_restarts_total", model_name="scripted", actor=a)
        for a in ("router", "input_processor", "scheduler", "executor", "output_processor")
    )
    assert restarts >= len(CRASHES)


# -- /v1/responses: supervised like every generation ----------------------------------------

RESPONSES_CRASHES = [
    CrashPoint(actor, at)
    for actor, at in [("scheduler", 4), ("worker", 6), ("output_processor", 9), ("router", 2)]
]


async def respond_one(client: httpx.AsyncClient, i: int) -> dict[str, Any]:
    """One streamed response: its text and status from response.completed, or the error."""
    body = {"input": f"client {i} asks", "max_output_tokens": 6, "temperature": 0, "stream": True}
    out: dict[str, Any] = {"text": None, "status": None, "error": None}
    async with client.stream("POST", "/v1/responses", json=body) as r:
        if r.status_code != 200:
            out["error"] = json.loads(await r.aread())["error"]
            return out
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[len("data: ") :])
            if event["type"] == "error":
                out["error"] = event
            elif event["type"] == "response.completed":
                resp = event["response"]
                parts = [c["text"] for item in resp["output"] for c in item["content"]]
                out["text"], out["status"] = "".join(parts), resp["status"]
    return out


def test_streamed_responses_survive_crashes(server: ServerThread) -> None:
    backend = server._settings.worker_class

    async def run_all() -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = [{} for _ in range(4)]
        async with httpx.AsyncClient(base_url=server.url, timeout=60.0) as client:

            async def one(i: int) -> None:
                results[i] = await respond_one(client, i)

            async with anyio.create_task_group() as tg:
                for i in range(4):
                    tg.start_soon(one, i)
        return results

    async def rounds() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        reference = await run_all()
        engine = app_state(server.app).ctx.engine
        triggers = [Trigger(p) for p in RESPONSES_CRASHES]
        for t in triggers:
            inject_fault(engine, t.point.actor, when=t)
        chaos = await run_all()
        while not all(t.fired for t in triggers):
            chaos += await run_all()
        return reference, chaos

    reference, chaos = anyio.run(rounds, backend=backend)
    assert all(r["error"] is None and r["status"] == "incomplete" for r in reference)
    for i, got in enumerate(chaos):
        if got["error"] is not None:  # a typed error, never a broken stream
            assert {"message", "code"} <= set(got["error"])
        else:
            assert (got["text"], got["status"]) == (reference[i % 4]["text"], "incomplete")
    assert any(r["error"] is None for r in chaos)  # recovered, not merely failed cleanly
