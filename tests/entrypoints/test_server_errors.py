"""Every error path over HTTP: OpenAI's error body, the right status, never a 500 or a hang."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import FakeEngine
from tests.entrypoints.server_thread import ServerThread

KEY = "sk-test"
AUTH = {"Authorization": f"Bearer {KEY}"}
LIMIT = 4096


@pytest.fixture(scope="module")
def guarded(engine: FakeEngine) -> Iterator[ServerThread]:
    srv = start_server(engine, api_key=KEY, max_body_bytes=LIMIT, dev_mode=True)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def http(guarded: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=guarded.url, headers=AUTH, timeout=10.0) as c:
        yield c


def error_of(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()["error"]
    assert set(body) == {"message", "type", "param", "code"} and body["code"] == status
    return dict(body)


def test_api_key_guards_v1_only(guarded: ServerThread) -> None:
    body = {"prompt": "x", "max_tokens": 1}
    err = error_of(httpx.post(guarded.url + "/v1/completions", json=body), 401)
    assert err["type"] == "AuthenticationError"
    wrong = {"Authorization": "Bearer sk-wrong"}
    error_of(httpx.post(guarded.url + "/v1/completions", json=body, headers=wrong), 401)
    assert httpx.post(guarded.url + "/v1/completions", json=body, headers=AUTH).status_code == 200
    for path in ("/health", "/version", "/metrics"):
        assert httpx.get(guarded.url + path).status_code == 200


def test_early_errors_with_an_unread_body_close_the_connection(
    guarded: ServerThread, http: httpx.Client
) -> None:
    """A guard or the router answering before the body was read says Connection: close, so a
    keep-alive client does not race the server's close with its next request."""
    body = {"prompt": "x", "max_tokens": 1}
    with httpx.Client(base_url=guarded.url) as keep_alive:
        unauthorised = keep_alive.post("/v1/completions", json=body)
        assert unauthorised.status_code == 401 and unauthorised.headers["connection"] == "close"
        assert keep_alive.post("/v1/completions", json=body, headers=AUTH).status_code == 200
    nowhere = http.post("/v1/nowhere", json=body)
    assert nowhere.status_code == 404 and nowhere.headers["connection"] == "close"
    wrong_method = http.put("/v1/completions", json=body)
    assert wrong_method.status_code == 405 and wrong_method.headers["connection"] == "close"
    for served in (http.post("/v1/completions", json=body), http.get("/v1/nowhere")):
        assert "close" not in served.headers.get("connection", "")  # body read, or none


def test_bad_json_and_wrong_types(http: httpx.Client) -> None:
    json_type = {"content-type": "application/json"}
    err = error_of(http.post("/v1/completions", content=b"{not json", headers=json_type), 400)
    assert "JSON" in err["message"]
    err = error_of(http.post("/v1/completions", json={"prompt": "x", "max_tokens": "ten"}), 400)
    assert err["param"] == "max_tokens"


BODIES = {
    "/v1/completions": b'{"prompt": "x", "max_tokens": 1}',
    "/v1/chat/completions": b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1}',
    "/tokenize": b'{"prompt": "x"}',
}


@pytest.mark.parametrize("path", list(BODIES))
@pytest.mark.parametrize("content_type", [None, "application/x-www-form-urlencoded", "text/plain"])
def test_a_json_route_refuses_a_body_not_declared_json(
    http: httpx.Client, path: str, content_type: str | None
) -> None:
    """vLLM's validate_json_request: its validation 400, whatever the body holds."""
    headers = {} if content_type is None else {"content-type": content_type}
    body = BODIES[path]
    r = http.post(path, content=body, headers=headers)
    err = error_of(r, 400)
    assert err["message"] == (
        "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed"
    )
    assert err["type"] == "Bad Request"
    ok = http.post(path, content=body, headers={"content-type": "application/json; charset=utf-8"})
    assert ok.status_code == 200


FUZZ: list[tuple[str, dict[str, Any], str | None]] = [
    ("/v1/completions", {}, "prompt"),
    ("/v1/completions", {"prompt": 5}, "prompt"),
    ("/v1/completions", {"prompt": []}, "prompt"),
    ("/v1/completions", {"prompt": [1, "a"]}, "prompt"),
    ("/v1/completions", {"prompt": [[1], []]}, "prompt"),
    ("/v1/completions", {"prompt": [-1]}, "prompt"),
    ("/v1/completions", {"prompt": ""}, "prompt"),
    ("/v1/completions", {"prompt": "x", "n": -1}, "n"),
    ("/v1/completions", {"prompt": "x", "n": 10**12}, "n"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 10**30}, "max_tokens"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 1000}, "max_tokens"),
    ("/v1/completions", {"prompt": "x", "top_p": 0}, "top_p"),
    ("/v1/completions", {"prompt": "x", "top_k": -5}, "top_k"),
    ("/v1/completions", {"prompt": "x", "seed": 2**70}, "seed"),
    ("/v1/completions", {"prompt": "x", "logprobs": 99}, "logprobs"),
    ("/v1/completions", {"prompt": "x", "logit_bias": {"abc": 1}}, "logit_bias"),
    ("/v1/completions", {"prompt": "x", "logit_bias": {"5": 500}}, "logit_bias"),
    ("/v1/completions", {"prompt": "x", "logit_bias": {"999999": 1}}, "logit_bias"),
    ("/v1/completions", {"prompt": "x", "stop": [""]}, "stop"),
    ("/v1/completions", {"prompt": "x", "stop": 3}, "stop"),
    ("/v1/completions", {"prompt": "x", "min_tokens": 20, "max_tokens": 2}, "min_tokens"),
    ("/v1/completions", {"prompt": "x", "presence_penalty": 9}, "presence_penalty"),
    ("/v1/completions", {"prompt": "x", "suffix": "s"}, "suffix"),
    ("/v1/completions", {"prompt": "word " * 100}, "prompt"),
    ("/v1/completions", {"prompt": "x", "stream": "yes"}, "stream"),
    ("/v1/chat/completions", {"messages": []}, "messages"),
    ("/v1/chat/completions", {"messages": "hi"}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 7}]}, "messages"),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "u"}]}]},
        "messages",
    ),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2},
        "top_logprobs",
    ),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "logprobs": 3},
        "logprobs",
    ),
    ("/tokenize", {}, "prompt"),
    ("/tokenize", {"prompt": "a", "messages": [{"role": "user", "content": "x"}]}, "prompt"),
    ("/detokenize", {"tokens": [10**6]}, "tokens"),
    ("/detokenize", {"tokens": "abc"}, "tokens"),
]


@pytest.mark.parametrize(("path", "body", "param"), FUZZ, ids=[str(b)[:40] for _, b, _ in FUZZ])
def test_invalid_input_is_400(
    http: httpx.Client, path: str, body: dict[str, Any], param: str | None
) -> None:
    err = error_of(http.post(path, json=body), 400)
    assert err["param"] == param, err


@pytest.mark.parametrize("value", [b"NaN", b"Infinity", b"1e999", b"-1e999"])
def test_non_finite_numbers_are_rejected(http: httpx.Client, value: bytes) -> None:
    # JSON has no NaN/Infinity; Python's json module still writes them.
    raw = b'{"prompt": "x", "temperature": ' + value + b"}"
    err = error_of(
        http.post("/v1/completions", content=raw, headers={"content-type": "application/json"}), 400
    )
    assert "Unsupported Media Type" not in err["message"]


def test_unknown_fields_are_ignored(http: httpx.Client) -> None:
    body = {"prompt": "x", "max_tokens": 1, "frobnicate": {"deep": [1]}}
    assert http.post("/v1/completions", json=body).status_code == 200


def test_unknown_model_route_and_method(http: httpx.Client) -> None:
    err = error_of(
        http.post(
            "/v1/chat/completions",
            json={"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]},
        ),
        404,
    )
    assert err["param"] == "model"
    error_of(http.get("/v1/nothing"), 404)
    error_of(http.get("/v1/completions"), 405)


def test_body_limit_on_content_length_and_while_streaming(http: httpx.Client) -> None:
    big = {"prompt": "x" * (LIMIT + 10)}
    r = http.post("/v1/completions", json=big)
    error_of(r, 413)
    # The unread body makes the connection unusable: the client is told not to reuse it.
    assert r.headers["connection"] == "close"

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer encoding
        yield b'{"prompt": "'
        for _ in range(LIMIT // 512 + 2):
            yield b"y" * 512
        yield b'"}'

    json_type = {"content-type": "application/json"}
    error_of(http.post("/v1/completions", content=chunks(), headers=json_type), 413)


def test_dev_mode_endpoints(http: httpx.Client, engine: FakeEngine) -> None:
    assert http.post("/sleep", params={"level": "1"}).status_code == 200
    assert http.get("/is_sleeping").json() == {"is_sleeping": True}
    assert http.post("/wake_up").status_code == 200
    assert http.get("/is_sleeping").json() == {"is_sleeping": False}
    assert http.post("/reset_prefix_cache").status_code == 200
    assert http.post("/kv_connector/toggle", params={"enabled": "false"}).json() == {
        "enabled": False
    }
    assert http.get("/kv_connector/enabled").json() == {"enabled": False}
    http.post("/kv_connector/toggle", params={"enabled": "true"})
    error_of(http.post("/sleep", params={"level": "7"}), 400)
    error_of(http.post("/kv_connector/toggle", params={"enabled": "maybe"}), 400)


def test_dev_endpoints_are_404_without_dev_mode(server: ServerThread) -> None:
    for method, path in [
        ("POST", "/sleep"),
        ("POST", "/wake_up"),
        ("GET", "/is_sleeping"),
        ("POST", "/reset_prefix_cache"),
        ("GET", "/kv_connector/enabled"),
    ]:
        error_of(httpx.request(method, server.url + path), 404)


def test_tokenize_roundtrip(http: httpx.Client) -> None:
    r = http.post("/tokenize", json={"prompt": "hello world"}).json()
    assert r["count"] == len(r["tokens"]) > 0 and r["max_model_len"] == 64
    assert http.post("/detokenize", json={"tokens": r["tokens"]}).json() == {
        "prompt": "hello world"
    }
    chat = http.post("/tokenize", json={"messages": [{"role": "user", "content": "hi"}]}).json()
    assert chat["count"] > r["count"] - 2


def test_version_and_openapi(http: httpx.Client) -> None:
    assert http.get("/version").json()["version"]
    doc = http.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    op = doc["paths"]["/v1/chat/completions"]["post"]
    ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    schema = doc["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert "messages" in schema["required"] and "top_logprobs" in schema["properties"]
    assert "/sleep" in doc["paths"]  # dev mode documents its routes


def test_dead_engine_is_503() -> None:
    engine = FakeEngine()
    srv = start_server(engine)
    try:
        engine.is_dead = True
        error_of(httpx.get(srv.url + "/health"), 503)
        err = error_of(httpx.post(srv.url + "/v1/completions", json={"prompt": "x"}), 503)
        assert err["type"] == "ServiceUnavailableError"
    finally:
        srv.stop()
