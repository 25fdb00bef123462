"""SageMaker customer middleware (app/sagemaker_middleware.py): a customer script in
tmp_path registers it by decorators or env vars, served on both backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from actorllm.entrypoints.openai.app import AppSettings, build_app
from actorllm.entrypoints.openai.app.sagemaker_middleware import sagemaker_middleware
from tests.entrypoints.conftest import engine_factory, start_server
from tests.entrypoints.fake_engine import FakeEngine

pytest.importorskip("model_hosting_container_standards")

BACKENDS = pytest.mark.parametrize("worker_class", ["trio", "asyncio"])
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

DECORATED = """
from model_hosting_container_standards.common.fastapi.middleware import (
    custom_middleware, input_formatter, output_formatter,
)

seen = []

@input_formatter
async def pre(request):
    seen.append(request.url.path)
    return request

@custom_middleware("throttle")
async def throttle(request, call_next):
    response = await call_next(request)
    response.headers["X-Order"] = response.headers.get("X-Order", "") + "throttle,"
    return response

@output_formatter
async def post(response):
    response.headers["X-Order"] = response.headers.get("X-Order", "") + "post,"
    response.headers["X-Pre-Seen"] = ",".join(seen)
    return response
"""


@pytest.fixture(autouse=True)
def fresh_package_state() -> Iterator[None]:
    """The package keeps its decorators' registry and the loaded script per process."""
    from model_hosting_container_standards.common.fastapi.middleware import middleware_registry
    from model_hosting_container_standards.common.fastapi.middleware.source.decorator_loader import (  # noqa: E501
        decorator_loader,
    )
    from model_hosting_container_standards.sagemaker.sagemaker_loader import (
        SageMakerFunctionLoader,
    )

    def clear() -> None:
        middleware_registry.clear_middlewares()
        decorator_loader.clear()
        SageMakerFunctionLoader._default_function_loader = None

    clear()
    yield
    clear()


@pytest.fixture
def script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where SageMaker finds the customer script; each test writes it."""
    monkeypatch.setenv("SAGEMAKER_MODEL_PATH", str(tmp_path))
    monkeypatch.setenv("CUSTOM_SCRIPT_FILENAME", "model.py")
    return tmp_path / "model.py"


@BACKENDS
def test_decorated_throttle_and_formatters(
    engine: FakeEngine, script: Path, worker_class: str
) -> None:
    script.write_text(DECORATED)
    srv = start_server(engine, worker_class=worker_class)
    try:
        for path in ("/v1/chat/completions", "/invocations"):
            r = httpx.post(srv.url + path, json=CHAT)
            assert r.status_code == 200, r.text
            # throttle is outermost: it sees the response after the output formatter
            assert r.headers["X-Order"] == "post,throttle,"
            assert r.headers["X-Pre-Seen"].split(",")[-1] == path
    finally:
        srv.stop()
    assert srv.error is None


@BACKENDS
def test_pre_post_process_middleware_on_ping(
    engine: FakeEngine, script: Path, worker_class: str
) -> None:
    script.write_text(
        "from model_hosting_container_standards.common.fastapi.middleware import"
        " custom_middleware\n"
        "@custom_middleware('pre_post_process')\n"
        "async def track(request, call_next):\n"
        "    response = await call_next(request)\n"
        "    response.headers['X-Path'] = request.url.path\n"
        "    return response\n"
    )
    srv = start_server(engine, worker_class=worker_class)
    try:
        r = httpx.get(srv.url + "/ping")
        assert r.status_code == 200 and r.headers["X-Path"] == "/ping"
    finally:
        srv.stop()


@BACKENDS
def test_env_vars_override_decorators(
    engine: FakeEngine, script: Path, monkeypatch: pytest.MonkeyPatch, worker_class: str
) -> None:
    script.write_text(
        DECORATED
        + """
async def env_throttle(request, call_next):
    response = await call_next(request)
    response.headers["X-Order"] = response.headers.get("X-Order", "") + "env_throttle,"
    return response

async def env_post(response):
    response.headers["X-Env-Post"] = "applied"
    return response
"""
    )
    monkeypatch.setenv("CUSTOM_FASTAPI_MIDDLEWARE_THROTTLE", "model.py:env_throttle")
    monkeypatch.setenv("CUSTOM_POST_PROCESS", "model.py:env_post")
    srv = start_server(engine, worker_class=worker_class)
    try:
        r = httpx.get(srv.url + "/ping")
        assert r.status_code == 200
        # the env's post-process replaces the decorated pair, its throttle the decorated one
        assert r.headers["X-Env-Post"] == "applied" and r.headers["X-Order"] == "env_throttle,"
    finally:
        srv.stop()


def test_no_script_no_middleware(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAGEMAKER_MODEL_PATH", str(tmp_path))
    assert sagemaker_middleware() == ([], [])


def test_missing_function_is_a_startup_error(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script.write_text("x = 1\n")
    monkeypatch.setenv("CUSTOM_PRE_PROCESS", "model.py:nowhere")
    with pytest.raises(ValueError, match=r"CUSTOM_PRE_PROCESS=model.py:nowhere"):
        build_app(lambda: engine_factory(FakeEngine()), AppSettings())


def test_broken_script_is_a_startup_error(script: Path) -> None:
    script.write_text("raise RuntimeError('customer bug')\n")
    with pytest.raises(ValueError, match=rf"{script}.*customer bug"):
        build_app(lambda: engine_factory(FakeEngine()), AppSettings())
