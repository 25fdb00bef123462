"""``/inference/v1/generate`` rides the engine's supervised request path: a worker or
scheduler crash in the middle of a greedy generation is recovered from the ledger, and the
client gets the same token ids, whole or streamed (trio and asyncio servers, the scripted
test engine)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from actorllm.entrypoints.openai.app import AppSettings, app_state, build_app
from actorllm.testing import inject_fault, open_test_engine
from tests.entrypoints.server_thread import ServerThread
from tests.entrypoints.test_server_metrics import sample

BODY = {"token_ids": [5, 6, 7, 8], "sampling_params": {"max_tokens": 12, "temperature": 0.0}}


@pytest.fixture(params=["trio", "asyncio"])
def server(request: pytest.FixtureRequest) -> Iterator[ServerThread]:
    engine = lambda: open_test_engine(step_delay_s=0.002, max_restarts=100)  # noqa: E731
    app = build_app(engine, AppSettings(log_interval_s=0, enable_scale_out=True))
    srv = ServerThread(app, worker_class=request.param).start()
    yield srv
    srv.stop()
    assert srv.error is None


def streamed_ids(url: str, body: dict[str, Any]) -> list[int]:
    r = httpx.post(url + "/inference/v1/generate", json={**body, "stream": True}, timeout=60)
    assert r.status_code == 200
    ids: list[int] = []
    for line in r.text.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            event = json.loads(line[len("data: ") :])
            assert "error" not in event, event
            ids += event["choices"][0]["token_ids"]
    return ids


@pytest.mark.parametrize("actor", ["worker", "scheduler"])
def test_a_crash_mid_generation_loses_nothing(server: ServerThread, actor: str) -> None:
    url = server.url + "/inference/v1/generate"
    reference = httpx.post(url, json=BODY, timeout=60).json()["choices"][0]["token_ids"]
    assert len(reference) == 12
    engine = app_state(server.app).ctx.engine
    inject_fault(engine, actor, at_message=5)  # a few tokens in
    whole = httpx.post(url, json=BODY, timeout=60).json()
    assert whole["choices"][0]["token_ids"] == reference
    assert whole["choices"][0]["finish_reason"] == "length"
    inject_fault(engine, actor, at_message=5)
    assert streamed_ids(server.url, BODY) == reference
    metrics = httpx.get(server.url + "/metrics").text
    restarts = sum(
        sample(metrics, "actorllm:actor_restarts_total", model_name="scripted", actor=a)
        for a in ("scheduler", "executor")  # a failed model step crashes the executor
    )
    assert restarts >= 2
