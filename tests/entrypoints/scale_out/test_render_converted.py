"""``/v1/messages/render``, ``/v1/responses/render`` and ``/cohere/v2/chat/render`` (fake
engine): each renders the chat request its own route would run (same token ids as the
route submits), with vLLM's ids and refusals."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import FakeEngine
from tests.entrypoints.server_thread import ServerThread

HI = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture(scope="module")
def server(engine: FakeEngine) -> Iterator[ServerThread]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VLLM_ENABLE_COHERE_API", "1")
        srv = start_server(engine, enable_scale_out=True)
    yield srv
    srv.stop()
    assert srv.error is None


def post(server: ServerThread, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=30)


def submitted_ids(engine: FakeEngine) -> list[int]:
    assert engine.last_request is not None
    prompt = engine.last_request[0]
    assert isinstance(prompt, dict)
    return list(prompt["prompt_token_ids"])


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/messages", {"model": "fake-model", "messages": HI, "max_tokens": 4}),
        ("/v1/responses", {"input": "What is the capital of France?", "max_output_tokens": 4}),
        ("/cohere/v2/chat", {"model": "fake-model", "messages": HI, "max_tokens": 4,
                             "temperature": 0.125, "stop_sequences": ["END"]}),
    ],
)  # fmt: skip
def test_render_is_what_the_route_runs(
    server: ServerThread, engine: FakeEngine, path: str, body: dict[str, Any]
) -> None:
    r = post(server, path + "/render", body)
    assert r.status_code == 200, r.text
    rendered = r.json()
    assert post(server, path, body).status_code == 200
    assert rendered["token_ids"] == submitted_ids(engine)
    assert engine.last_request is not None
    assert rendered["sampling_params"]["max_tokens"] == engine.last_request[1].max_tokens == 4
    if path.startswith("/cohere"):
        assert rendered["sampling_params"]["temperature"] == 0.125
        assert rendered["sampling_params"]["stop"] == ["END"]
    if path == "/v1/responses":
        assert rendered["request_id"].startswith("resp_")


def test_responses_render_is_stateless(server: ServerThread) -> None:
    r = post(server, "/v1/responses/render", {"input": "hi", "previous_response_id": "resp_x"})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "previous_response_id"


def test_cohere_render_errors_have_cohere_body(server: ServerThread) -> None:
    r = post(server, "/cohere/v2/chat/render", {"messages": []})
    assert r.status_code == 400
    assert "error" not in r.json() and r.json()["message"]


def test_messages_render_errors_have_openai_body(server: ServerThread) -> None:
    r = post(server, "/v1/messages/render", {"model": "nope", "messages": HI, "max_tokens": 4})
    assert r.status_code == 404 and r.json()["error"]["code"] == 404
