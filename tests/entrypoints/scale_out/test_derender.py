"""render -> generate -> derender over HTTP (trio and asyncio servers, fake engine): the
pipeline answers what the plain chat / completions route answers (text, finish reason,
logprobs, usage), and derender refuses what it cannot honour with 400s."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import FakeEngine
from tests.entrypoints.server_thread import ServerThread

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture(scope="module", params=["trio", "asyncio"])
def server(engine: FakeEngine, request: pytest.FixtureRequest) -> Iterator[ServerThread]:
    srv = start_server(engine, worker_class=request.param, enable_scale_out=True)
    yield srv
    srv.stop()
    assert srv.error is None


def post(server: ServerThread, path: str, body: Any) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=30)


def pipeline_chat(server: ServerThread, body: dict[str, Any]) -> dict[str, Any]:
    rendered = post(server, "/v1/chat/completions/render", body).json()
    gen = post(server, "/inference/v1/generate", rendered).json()
    derender = {"generate_response": gen, "prompt_tokens": len(rendered["token_ids"]),
                "prompt_token_ids": rendered["token_ids"], "chat_request": body}  # fmt: skip
    r = post(server, "/v1/chat/completions/derender", derender)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    for key in ("id", "created", "system_fingerprint"):
        a.pop(key, None), b.pop(key, None)
    a["usage"].pop("prompt_tokens_details", None), b["usage"].pop("prompt_tokens_details", None)
    assert a == b


@pytest.mark.parametrize(
    "extra",
    [{"max_tokens": 4}, {"max_tokens": 3, "logprobs": True, "top_logprobs": 2},
     {"max_tokens": 6, "stop": [" brown"]}, {"max_tokens": 3, "n": 2}],
)  # fmt: skip
def test_chat_pipeline_is_the_plain_answer(server: ServerThread, extra: dict[str, Any]) -> None:
    body = {"messages": HI, **extra}
    plain = post(server, "/v1/chat/completions", body).json()
    _same(pipeline_chat(server, body), plain)


@pytest.mark.parametrize(
    "extra",
    [{"max_tokens": 4}, {"max_tokens": 3, "logprobs": 2}, {"max_tokens": 2, "echo": True},
     {"max_tokens": 3, "prompt": ["one", "two"]}],
)  # fmt: skip
def test_completion_pipeline_is_the_plain_answer(
    server: ServerThread, extra: dict[str, Any]
) -> None:
    body = {"prompt": "hello there", **extra}
    plain = post(server, "/v1/completions", body).json()
    rendered = post(server, "/v1/completions/render", body).json()
    gens = [post(server, "/inference/v1/generate", g).json() for g in rendered]
    derender = {"generate_responses": gens,
                "prompt_tokens": [len(g["token_ids"]) for g in rendered],
                "prompt_token_ids": [g["token_ids"] for g in rendered],
                "completion_request": body}  # fmt: skip
    r = post(server, "/v1/completions/derender", derender)
    assert r.status_code == 200, r.text
    _same(r.json(), plain)


def test_without_chat_request_plain_detokenization(server: ServerThread) -> None:
    gen = post(server, "/inference/v1/generate",
               {"token_ids": [1, 2], "sampling_params": {"max_tokens": 3}}).json()  # fmt: skip
    got = post(server, "/v1/chat/completions/derender", {"generate_response": gen}).json()
    assert got["id"] == gen["request_id"] and got["model"] == "fake-model"
    assert got["choices"][0]["message"]["content"].strip()
    assert got["usage"] == {"prompt_tokens": 0, "completion_tokens": 3, "total_tokens": 3,
                            "prompt_tokens_details": None}  # fmt: skip


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/completions/derender", {"generate_responses": []}, "generate_responses"),
        ("/v1/completions/derender",
         {"generate_responses": [{"request_id": "a", "choices": []}], "prompt_tokens": [1, 2]},
         "prompt_tokens"),
        ("/v1/chat/completions/derender",
         {"generate_response": {"request_id": "a", "choices": [], "output_mode": "text"}},
         "output_mode"),
        ("/v1/chat/completions/derender",
         {"stream": True, "generate_chunk": {"request_id": "a", "choices": []}}, None),
        ("/v1/chat/completions/derender", {"generate_response": {"choices": []}}, None),
    ],
)  # fmt: skip
def test_refusals(server: ServerThread, path: str, body: dict[str, Any], param: str | None) -> None:
    r = post(server, path, body)
    assert r.status_code == 400, r.text
    if param is not None:
        assert r.json()["error"]["param"] == param
