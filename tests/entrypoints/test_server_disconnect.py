"""A client that goes away aborts its request: the engine iterator is closed (blocks freed)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import FakeEngine
from tests.entrypoints.server_thread import ServerThread


@pytest.fixture(scope="module", params=["trio", "asyncio"])
def slow(request: pytest.FixtureRequest) -> Iterator[tuple[ServerThread, FakeEngine]]:
    engine = FakeEngine(token_delay_s=0.05, max_model_len=4096)
    srv = start_server(engine, worker_class=request.param)
    yield srv, engine
    srv.stop()
    assert srv.error is None


def wait_aborted(engine: FakeEngine, request_id: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if request_id in engine.aborted and request_id not in engine.open:
            return
        time.sleep(0.02)
    raise AssertionError(
        f"{request_id} was not aborted: open={engine.open} aborted={engine.aborted}"
    )


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_streaming_disconnect_aborts(slow: tuple[ServerThread, FakeEngine], path: str) -> None:
    srv, engine = slow
    rid = f"stream-{path.count('/')}"
    body = {"max_tokens": 1000, "stream": True, "request_id": rid}
    body.update(
        {"prompt": "x"} if "chat" not in path else {"messages": [{"role": "user", "content": "x"}]}
    )
    with httpx.Client(base_url=srv.url) as c, c.stream("POST", path, json=body) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        assert next(lines).startswith("data: ")
    # the connection is closed here, long before 1000 tokens
    prefix = "chatcmpl" if "chat" in path else "cmpl"
    wait_aborted(engine, f"{prefix}-{rid}")


def test_non_streaming_disconnect_aborts(slow: tuple[ServerThread, FakeEngine]) -> None:
    srv, engine = slow
    body = {"prompt": ["a", "b"], "max_tokens": 1000, "request_id": "plain"}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(srv.url + "/v1/completions", json=body, timeout=0.5)
    wait_aborted(engine, "cmpl-plain-0")
    wait_aborted(engine, "cmpl-plain-1")


def test_graceful_shutdown_drains_in_flight_requests() -> None:
    engine = FakeEngine(token_delay_s=0.02)
    srv = start_server(engine)
    with (
        httpx.Client(base_url=srv.url) as c,
        c.stream(
            "POST", "/v1/completions", json={"prompt": "x", "max_tokens": 20, "stream": True}
        ) as r,
    ):
        srv._stop.set()  # shutdown starts while the response streams
        text = "".join(r.iter_lines())
    srv.stop()
    assert text.endswith("data: [DONE]") and '"finish_reason":"length"' in text
    assert engine.finished and not engine.aborted
