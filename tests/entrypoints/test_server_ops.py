"""Operations: /ping, X-Request-Id, CORS (off unless configured), TLS, --root-path,
--response-role, --enable-log-requests, /v1/models' max_model_len; on a real hypercorn
server over the fake engine."""

from __future__ import annotations

import logging
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from actorllm.entrypoints.openai.app import AppSettings, build_app
from tests.entrypoints.conftest import engine_factory, start_server
from tests.entrypoints.fake_engine import FakeEngine
from tests.entrypoints.server_thread import ServerThread

ORIGIN = "https://ui.example"


@pytest.fixture(scope="module")
def ops(engine: FakeEngine) -> Iterator[ServerThread]:
    srv = start_server(
        engine,
        allowed_origins=[ORIGIN],
        allowed_methods=["GET", "POST"],
        root_path="/llm",
        response_role="bot",
        enable_request_id_headers=True,
        enable_log_requests=True,
        enable_log_outputs=True,
        max_log_len=20,
    )
    yield srv
    srv.stop()


def test_ping_get_and_post(server: ServerThread) -> None:
    assert httpx.get(server.url + "/ping").status_code == 200
    assert httpx.post(server.url + "/ping").status_code == 200


def test_request_id_echoed_on_every_response(ops: ServerThread) -> None:
    given = httpx.get(ops.url + "/health", headers={"X-Request-Id": "abc-123"})
    assert given.headers["x-request-id"] == "abc-123"
    fresh = [httpx.get(ops.url + "/v1/models").headers["x-request-id"] for _ in range(2)]
    assert all(fresh) and fresh[0] != fresh[1]
    missing = httpx.get(ops.url + "/nowhere", headers={"X-Request-Id": "r404"})
    assert missing.status_code == 404 and missing.headers["x-request-id"] == "r404"


def test_request_id_header_becomes_the_request_id(ops: ServerThread, engine: FakeEngine) -> None:
    body = {"model": "fake-model", "prompt": "hi", "max_tokens": 2}
    r = httpx.post(ops.url + "/v1/completions", json=body, headers={"X-Request-Id": "mine-7"})
    assert r.status_code == 200 and r.json()["id"] == "cmpl-mine-7"
    assert "cmpl-mine-7" in engine.finished
    chat = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    r = httpx.post(ops.url + "/v1/chat/completions", json=chat, headers={"X-Request-Id": "c-8"})
    assert r.json()["id"] == "chatcmpl-c-8" and r.headers["x-request-id"] == "c-8"


def test_no_request_id_header_by_default(server: ServerThread, engine: FakeEngine) -> None:
    # vLLM sends X-Request-Id only with --enable-request-id-headers; a given one is still
    # the request's id.
    assert "x-request-id" not in httpx.get(server.url + "/v1/models").headers
    body = {"model": "fake-model", "prompt": "hi", "max_tokens": 2}
    r = httpx.post(server.url + "/v1/completions", json=body, headers={"X-Request-Id": "mine-9"})
    assert r.json()["id"] == "cmpl-mine-9" and "x-request-id" not in r.headers


def test_routes_the_model_does_not_serve_are_404(server: ServerThread) -> None:
    # a generative model: vLLM mounts no pooling route (FastAPI's 404 body, and ours)
    for path in ("/v1/embeddings", "/pooling", "/classify", "/score", "/rerank", "/v2/embed"):
        r = httpx.post(server.url + path, json={"input": "x"})
        assert r.status_code == 404 and r.json()["detail"] == "Not Found", path
        assert r.json()["error"]["type"] == "NotFoundError"
    unknown = httpx.get(server.url + "/nowhere").json()
    assert unknown["detail"] == "Not Found" and unknown["error"]["code"] == 404
    assert "detail" not in httpx.post(server.url + "/v1/completions", json={}).json()


def test_no_cross_origin_access_by_default(server: ServerThread) -> None:
    r = httpx.get(server.url + "/v1/models", headers={"Origin": ORIGIN})
    assert "access-control-allow-origin" not in r.headers
    preflight = httpx.options(
        server.url + "/v1/completions",
        headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"},
    )
    assert "access-control-allow-origin" not in preflight.headers


def test_cors_when_configured(ops: ServerThread) -> None:
    preflight = httpx.options(
        ops.url + "/v1/completions",
        headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"},
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in preflight.headers["access-control-allow-methods"]
    r = httpx.get(ops.url + "/v1/models", headers={"Origin": ORIGIN})
    assert r.headers["access-control-allow-origin"] == ORIGIN
    other = httpx.get(ops.url + "/v1/models", headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in other.headers
    refused = httpx.options(
        ops.url + "/v1/completions",
        headers={"Origin": ORIGIN, "Access-Control-Request-Method": "DELETE"},
    )
    assert refused.status_code == 400


def test_root_path_prefix_is_optional(ops: ServerThread) -> None:
    # A proxy may forward /llm/v1/models as is, or strip the prefix: both work.
    assert httpx.get(ops.url + "/llm/v1/models").status_code == 200
    assert httpx.get(ops.url + "/v1/models").status_code == 200


def test_response_role(ops: ServerThread) -> None:
    chat = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    r = httpx.post(ops.url + "/v1/chat/completions", json=chat)
    assert r.json()["choices"][0]["message"]["role"] == "bot"
    with httpx.stream("POST", ops.url + "/v1/chat/completions", json={**chat, "stream": True}) as s:
        first = next(line for line in s.iter_lines() if line.startswith("data: "))
    assert '"role":"bot"' in first


def test_log_requests(ops: ServerThread, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="actorllm.requests"):
        body = {"model": "fake-model", "prompt": "the quick brown fox " * 5, "max_tokens": 1}
        httpx.post(ops.url + "/v1/completions", json=body, headers={"X-Request-Id": "log-1"})
    lines = [r.getMessage() for r in caplog.records if "log-1" in r.getMessage()]
    assert any("POST /v1/completions" in line for line in lines)
    assert any("status 200" in line for line in lines)
    logged_body = next(line for line in lines if "{" in line).split(" ", 4)[-1]
    assert len(logged_body) <= 20  # --max-log-len
    outputs = [r.getMessage() for r in caplog.records if "cmpl-log-1: output 0" in r.getMessage()]
    assert len(outputs) == 1 and outputs[0].endswith("finish_reason length")


def test_log_outputs_of_streams(ops: ServerThread, caplog: pytest.LogCaptureFixture) -> None:
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": True}
    with (
        caplog.at_level(logging.INFO, logger="actorllm.requests"),
        httpx.stream(
            "POST", ops.url + "/v1/chat/completions", json=chat, headers={"X-Request-Id": "s-1"}
        ) as s,
    ):
        assert [line for line in s.iter_lines() if line][-1] == "data: [DONE]"
    outputs = [r.getMessage() for r in caplog.records if "chatcmpl-s-1: output 0" in r.getMessage()]
    assert len(outputs) == 1 and "finish_reason length" in outputs[0]


def test_models_reports_the_configured_max_model_len(server: ServerThread) -> None:
    card = httpx.get(server.url + "/v1/models").json()["data"][0]
    assert card["max_model_len"] == 64  # the fake engine's max_model_len


def _self_signed(directory: Path) -> tuple[Path, Path]:
    key, cert = directory / "key.pem", directory / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return key, cert


def test_tls(engine: FakeEngine, tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    key, cert = _self_signed(tmp_path)
    app: Any = build_app(lambda: engine_factory(engine), AppSettings(log_interval_s=0))
    srv = ServerThread(app, ssl_keyfile=str(key), ssl_certfile=str(cert)).start()
    try:
        assert srv.url.startswith("https://")
        trusted = ssl.create_default_context(cafile=str(cert))
        assert httpx.get(srv.url + "/health", verify=trusted).status_code == 200
        with pytest.raises(httpx.HTTPError):  # plain HTTP on the TLS port gets no answer
            httpx.get(srv.url.replace("https", "http") + "/health", timeout=2.0)
    finally:
        srv.stop()


# -- vLLM's other frontend flags ---------------------------------------------------------------


def test_unix_domain_socket(engine: FakeEngine, tmp_path: Path) -> None:
    """--uds: the API on a Unix socket instead of host:port."""
    path = str(tmp_path / "api.sock")
    app: Any = build_app(lambda: engine_factory(engine), AppSettings(log_interval_s=0))
    srv = ServerThread(app, uds=path).start()
    try:
        with srv.client(timeout=10) as c:
            assert c.get("/v1/models").json()["data"][0]["id"] == "fake-model"
            body = {"prompt": "hi", "max_tokens": 2}
            assert c.post("/v1/completions", json=body).status_code == 200
    finally:
        srv.stop()


class TagMiddleware:
    """An ASGI middleware class, as --middleware imports one: tags every response."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def tagged(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message["headers"], (b"x-tag", b"class")]}
            await send(message)

        await self.app(scope, receive, tagged)


async def refuse_teapots(request: Any, call_next: Any) -> Any:
    """An HTTP middleware function, as --middleware imports one."""
    from starlette.responses import Response

    if request.headers.get("x-teapot"):
        return Response(status_code=418)
    return await call_next(request)


def test_middleware_classes_and_functions(engine: FakeEngine) -> None:
    srv = start_server(
        engine,
        middleware=[
            "tests.entrypoints.test_server_ops.TagMiddleware",
            "tests.entrypoints.test_server_ops.refuse_teapots",
        ],
    )
    try:
        r = httpx.get(srv.url + "/v1/models")
        assert r.status_code == 200 and r.headers["x-tag"] == "class"
        assert httpx.get(srv.url + "/v1/models", headers={"x-teapot": "1"}).status_code == 418
        body = {"prompt": "hi", "max_tokens": 3, "stream": True}
        with httpx.stream("POST", srv.url + "/v1/completions", json=body) as s:
            assert s.headers["x-tag"] == "class"
            assert [line for line in s.iter_lines() if line][-1] == "data: [DONE]"
    finally:
        srv.stop()


def test_several_api_keys(engine: FakeEngine) -> None:
    srv = start_server(engine, api_key=["key-a", "key-b"])
    try:
        chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        assert httpx.post(srv.url + "/invocations", json=chat).status_code == 401
        for key, status in (("key-a", 200), ("key-b", 200), ("key-c", 401)):
            r = httpx.get(srv.url + "/v1/models", headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == status, key
        assert httpx.get(srv.url + "/v1/models").status_code == 401
    finally:
        srv.stop()


def test_served_model_name_aliases() -> None:
    fake = FakeEngine()
    fake.model_names = ["fake-model", "alias"]
    srv = start_server(fake)
    try:
        ids = [card["id"] for card in httpx.get(srv.url + "/v1/models").json()["data"]]
        assert ids == ["fake-model", "alias"]
        for name in ("fake-model", "alias"):
            r = httpx.post(
                srv.url + "/v1/completions", json={"model": name, "prompt": "hi", "max_tokens": 1}
            )
            assert r.status_code == 200 and r.json()["model"] == "fake-model"  # the first name
        r = httpx.post(srv.url + "/v1/completions", json={"model": "other", "prompt": "hi"})
        assert r.status_code == 404 and r.json()["error"]["param"] == "model"
    finally:
        srv.stop()


def _data_lines(srv: ServerThread, path: str, body: dict[str, Any]) -> list[Any]:
    import json

    with httpx.stream("POST", srv.url + path, json=body) as s:
        lines = [line[6:] for line in s.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def test_server_wide_request_defaults(engine: FakeEngine) -> None:
    """--enable-force-include-usage, --return-tokens-as-token-ids,
    --default-chat-template-kwargs, --exclude-tools-when-tool-choice-none,
    --trust-request-chat-template."""
    srv = start_server(
        engine,
        enable_force_include_usage=True,
        return_tokens_as_token_ids=True,
        default_chat_template_kwargs={"greeting": "ahoy"},
        exclude_tools_when_tool_choice_none=True,
        trust_request_chat_template=True,
    )
    try:
        chunks = _data_lines(
            srv, "/v1/completions", {"prompt": "hi", "max_tokens": 2, "stream": True}
        )
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 2
        assert all(c["usage"] is not None for c in chunks)  # every chunk, as vLLM's
        chat = _data_lines(
            srv, "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": True},
        )  # fmt: skip
        assert chat[0]["choices"][0]["delta"]["role"] == "assistant"  # the role chunk too
        assert chat[0]["usage"]["completion_tokens"] == 0 and chat[0]["usage"]["prompt_tokens"] > 0
        assert all(c["usage"] is not None for c in chat)
        r = httpx.post(
            srv.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2, "logprobs": 1}
        )
        assert all(t.startswith("token_id:") for t in r.json()["choices"][0]["logprobs"]["tokens"])
        template = "{{ greeting }}{% for m in messages %} {{ m['content'] }}{% endfor %}"
        template += "{% if tools %} TOOLS{% endif %}"
        msgs = [{"role": "user", "content": "hi"}]
        tokens = httpx.post(
            srv.url + "/tokenize",
            json={"messages": msgs, "chat_template_kwargs": {}, "add_generation_prompt": False},
        )
        assert tokens.status_code == 200
        engine.tokenizer.chat_template, saved = template, engine.tokenizer.chat_template
        try:
            tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
            body = {"messages": msgs, "max_tokens": 1, "tools": tools, "tool_choice": "none"}
            assert httpx.post(srv.url + "/v1/chat/completions", json=body).status_code == 200
            prompt = engine.last_request[0] if engine.last_request else None
            text = prompt.get("prompt") if isinstance(prompt, dict) else prompt
            assert text == "ahoy hi"  # the default kwargs, and no tools in the prompt
            own = {**body, "chat_template_kwargs": {"greeting": "hello"}}
            httpx.post(srv.url + "/v1/chat/completions", json=own)
            prompt = engine.last_request[0] if engine.last_request else None
            text = prompt.get("prompt") if isinstance(prompt, dict) else prompt
            assert text == "hello hi"  # the request's own win
            mine = {**body, "chat_template": "[{{ messages[0]['content'] }}]"}
            assert httpx.post(srv.url + "/v1/chat/completions", json=mine).status_code == 200
            prompt = engine.last_request[0] if engine.last_request else None
            text = prompt.get("prompt") if isinstance(prompt, dict) else prompt
            assert text == "[hi]"  # trusted: the request's own template
            tokenize = {"messages": msgs, "chat_template": mine["chat_template"]}
            tokens = httpx.post(srv.url + "/tokenize", json=tokenize)
            assert tokens.json()["tokens"] == engine.tokenizer.encode(
                "[hi]", add_special_tokens=False
            )
            # /tokenize hands tools to the template too (counted like chat's prompt).
            counted = {"messages": msgs, "tools": tools, "chat_template": "{{ tools|length }}"}
            assert httpx.post(srv.url + "/tokenize", json=counted).json()["tokens"] == (
                engine.tokenizer.encode("1", add_special_tokens=False)
            )
        finally:
            engine.tokenizer.chat_template = saved
    finally:
        srv.stop()


def test_tokenizer_info_only_when_enabled(server: ServerThread, engine: FakeEngine) -> None:
    assert httpx.get(server.url + "/tokenizer_info").status_code == 404
    srv = start_server(engine, enable_tokenizer_info_endpoint=True)
    try:
        info = httpx.get(srv.url + "/tokenizer_info").json()
        assert info["tokenizer_class"] == type(engine.tokenizer).__name__
        assert info["chat_template"] == engine.tokenizer.chat_template
        assert "/tokenizer_info" in httpx.get(srv.url + "/openapi.json").json()["paths"]
    finally:
        srv.stop()


def test_invocations_routes_by_body(server: ServerThread) -> None:
    """SageMaker's POST /invocations (with /ping): chat with messages, completion with prompt."""
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    r = httpx.post(server.url + "/invocations", json=chat)
    assert r.status_code == 200 and r.json()["object"] == "chat.completion"
    r = httpx.post(server.url + "/invocations", json={"prompt": "hi", "max_tokens": 2})
    assert r.status_code == 200 and r.json()["object"] == "text_completion"
    r = httpx.post(server.url + "/invocations", json={"input": "hi"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "BadRequestError"


def test_generation_config_defaults(tmp_path: Path) -> None:
    """--generation-config DIR / --override-generation-config: the sampling fields a request
    leaves out; a request's own values win; vllm: OpenAI's defaults."""
    import json

    (tmp_path / "generation_config.json").write_text(
        json.dumps({"temperature": 0.25, "top_p": 0.5, "max_new_tokens": 3, "do_sample": True})
    )
    fake = FakeEngine()  # the fields are the engine's (EngineConfig), as vLLM's ModelConfig
    fake.config = fake.config.replace(
        generation_config=str(tmp_path), override_generation_config={"top_k": 7}
    )
    srv = start_server(fake)
    try:
        body: dict[str, Any] = {"prompt": "hi", "max_tokens": 1}
        assert httpx.post(srv.url + "/v1/completions", json=body).status_code == 200
        params = fake.last_request[1] if fake.last_request else None
        assert params is not None
        assert (params.temperature, params.top_p, params.top_k) == (0.25, 0.5, 7)
        own = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "top_p": 0.9}
        assert httpx.post(srv.url + "/v1/chat/completions", json=own).status_code == 200
        params = fake.last_request[1] if fake.last_request else None
        assert params is not None and (params.temperature, params.top_p) == (0.25, 0.9)
        del own["max_tokens"]  # none given: the room left, capped by max_new_tokens
        assert httpx.post(srv.url + "/v1/chat/completions", json=own).status_code == 200
        params = fake.last_request[1] if fake.last_request else None
        assert params is not None and params.max_tokens == 3
    finally:
        srv.stop()
    plain = FakeEngine()
    plain.config = plain.config.replace(generation_config="vllm")
    srv = start_server(plain)
    try:
        httpx.post(srv.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1})
        params = plain.last_request[1] if plain.last_request else None
        assert params is not None and (params.temperature, params.top_p) == (1.0, 1.0)
    finally:
        srv.stop()
    bad = FakeEngine()
    bad.config = bad.config.replace(generation_config=str(tmp_path / "none"))
    with pytest.raises(RuntimeError):  # no such directory: start-up fails
        start_server(bad)


def test_server_load_tracking_counts_requests_in_flight() -> None:
    """--enable-server-load-tracking: GET /load counts generation requests until their
    response (a stream's last chunk) is sent; without the flag it stays 0, as vLLM."""
    fake = FakeEngine(token_delay_s=0.2)
    srv = start_server(fake, enable_server_load_tracking=True)
    try:
        assert httpx.get(srv.url + "/load").json() == {"server_load": 0}
        body = {"prompt": "hi", "max_tokens": 3, "stream": True}
        with httpx.stream("POST", srv.url + "/v1/completions", json=body) as r:
            lines = r.iter_lines()  # one iterator: dropping one closes the stream
            assert next(lines).startswith("data: ")  # the stream is open
            assert httpx.get(srv.url + "/load").json() == {"server_load": 1}
            for _ in lines:
                pass
        assert httpx.post(srv.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1})
        bad = httpx.post(srv.url + "/v1/completions", json={"prompt": "hi", "top_p": 7})
        assert bad.status_code == 400  # refused requests are counted out too
        assert httpx.get(srv.url + "/load").json() == {"server_load": 0}
    finally:
        srv.stop()
    plain = start_server(FakeEngine(token_delay_s=0.2))
    try:
        body = {"prompt": "hi", "max_tokens": 3, "stream": True}
        with httpx.stream("POST", plain.url + "/v1/completions", json=body) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("data: ")
            assert httpx.get(plain.url + "/load").json() == {"server_load": 0}
    finally:
        plain.stop()


def test_scale_out_routes_answer_vllms_disabled_403(server: ServerThread) -> None:
    """vLLM registers its scale-out routes disabled without --enable-scale-out: a 403
    PermissionDeniedError, not a 404 (and not in the OpenAPI document)."""
    from actorllm.entrypoints.openai.app.routes import SCALE_OUT_PATHS

    for path in SCALE_OUT_PATHS:
        r = httpx.post(server.url + path, json={})
        assert r.status_code == 403, path
        err = r.json()["error"]
        assert err["type"] == "PermissionDeniedError" and err["code"] == 403
        assert err["message"].startswith("Scale-out endpoints are disabled.")
    paths = httpx.get(server.url + "/openapi.json").json()["paths"]
    assert not set(SCALE_OUT_PATHS) & set(paths)
