"""Overload over HTTP (issue 18): beyond ``max_waiting_requests`` the server answers 503
with a ``Retry-After`` header and an OpenAI error body; the requests it accepted finish."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import httpx
import pytest

from actorllm.entrypoints.openai.app import AppSettings, build_app
from actorllm.testing import open_test_engine
from tests.entrypoints.server_thread import ServerThread


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    engine = lambda: open_test_engine(step_delay_s=0.01, max_waiting_requests=2)  # noqa: E731
    srv = ServerThread(build_app(engine, AppSettings(log_interval_s=0))).start()
    yield srv
    srv.stop()
    assert srv.error is None


def test_a_burst_gets_503_with_retry_after(server: ServerThread) -> None:
    responses: list[httpx.Response] = []

    async def burst() -> None:
        async with httpx.AsyncClient(base_url=server.url, timeout=30.0) as client:

            async def one(i: int, stream: bool) -> None:
                body = {"prompt": f"burst {i}", "max_tokens": 8, "stream": stream}
                responses.append(await client.post("/v1/completions", json=body))

            async with anyio.create_task_group() as tg:
                for i in range(12):
                    tg.start_soon(one, i, i % 2 == 0)

    anyio.run(burst)
    refused = [r for r in responses if r.status_code == 503]
    served = [r for r in responses if r.status_code == 200]
    assert len(refused) + len(served) == 12 and refused and served
    for r in refused:
        assert int(r.headers["Retry-After"]) >= 1
        error = r.json()["error"]
        assert (
            error["type"] == "ServiceUnavailableError"
            and "max_waiting_requests" in error["message"]
        )
    assert httpx.get(server.url + "/health").status_code == 200


def test_vllms_queue_limits_answer_503_and_count_the_refusals() -> None:
    # --max-num-queued-reqs 0: every generation route refuses (vLLM's words), a pooling
    # or tokenize route does not check it (vLLM's neither)
    engine = lambda: open_test_engine(max_num_queued_reqs=0)  # noqa: E731
    srv = ServerThread(build_app(engine, AppSettings(log_interval_s=0))).start()
    try:
        bodies = {
            "/v1/completions": {"prompt": "x", "max_tokens": 2},
            "/v1/chat/completions": {"messages": [{"role": "user", "content": "x"}]},
            "/v1/responses": {"input": "x"},
        }
        for path, body in bodies.items():
            r = httpx.post(srv.url + path, json=body, timeout=30)
            assert r.status_code == 503, (path, r.text)
            assert "cannot accept new requests" in r.json()["error"]["message"]
            assert int(r.headers["Retry-After"]) >= 1
        assert httpx.post(srv.url + "/tokenize", json={"prompt": "x"}).status_code == 200
        metrics = httpx.get(srv.url + "/metrics").text
        line = 'admission_rejections_total{model_name="scripted",reason='
        assert line + '"max_num_queued_reqs"} 3.0' in metrics
        assert line + '"max_num_queued_tokens"} 0.0' in metrics
    finally:
        srv.stop()
    assert srv.error is None
