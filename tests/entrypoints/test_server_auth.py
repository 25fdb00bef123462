"""--api-key over every route the app has, with and without --root-path: the guarded ones
answer 401 without the key (also when the request carries the proxy's prefix) and never
with it; the others stay open. The routes are read from the app, not listed here, so a
route added later is walked too."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from starlette.routing import Route

from actorllm.entrypoints.openai.app import AppSettings, build_app
from actorllm.entrypoints.openai.middleware import APIKeyMiddleware
from tests.entrypoints.conftest import engine_factory
from tests.entrypoints.fake_engine import FakeEngine
from tests.entrypoints.server_thread import ServerThread

KEY = "sk-walk"
# What vLLM's AuthenticationMiddleware guards (a prefix test on the path less root_path),
# and SageMaker's /invocations, which we guard too. Written out here as the specification
# the middleware is checked against.
VLLM_GUARDED = ("/v1", "/v2", "/inference", "/cohere")
ALSO_GUARDED = {"/invocations"}
# vLLM leaves these open (probes, scrapers, tooling): they must stay open.
MUST_STAY_OPEN = {"/health", "/ping", "/metrics", "/version", "/load", "/tokenize"}


def guarded(path: str) -> bool:
    return path.startswith(VLLM_GUARDED) or path in ALSO_GUARDED


@pytest.fixture(params=[None, "/llm"], ids=["no-root-path", "root-path"], scope="module")
def walked(request: pytest.FixtureRequest) -> Iterator[tuple[ServerThread, list[Route], str]]:
    root_path = request.param
    # Every optional route switched on, so the walk covers them all.
    settings = AppSettings(
        log_interval_s=0,
        api_key=KEY,
        root_path=root_path,
        dev_mode=True,
        enable_tokenizer_info_endpoint=True,
    )
    app = build_app(lambda: engine_factory(FakeEngine()), settings)
    routes = [r for r in app.routes if isinstance(r, Route)]
    srv = ServerThread(app).start()
    yield srv, routes, root_path or ""
    srv.stop()


def test_the_walk_sees_the_api(walked: tuple[ServerThread, list[Route], str]) -> None:
    _, routes, _ = walked
    paths = {r.path for r in routes}
    assert {"/v1/chat/completions", "/v1/completions", "/v1/models", "/invocations"} <= paths
    assert MUST_STAY_OPEN | {"/sleep", "/tokenizer_info", "/openapi.json"} <= paths
    assert not any(guarded(path) for path in MUST_STAY_OPEN)


def test_every_route_with_and_without_the_key(
    walked: tuple[ServerThread, list[Route], str],
) -> None:
    srv, routes, root_path = walked
    # Under --root-path a request comes with the proxy's prefix or without it (stripped).
    prefixes = ["", root_path] if root_path else [""]
    keys = {
        "none": {},
        "wrong": {"Authorization": "Bearer nope"},
        "key": {"Authorization": f"Bearer {KEY}"},
    }
    wrong: list[str] = []
    with httpx.Client() as client:  # keep-alive: the walk is a few hundred requests
        for route in routes:
            for method in sorted(route.methods or ()):
                for prefix in prefixes:
                    url = srv.url + prefix + route.path
                    seen = {
                        name: client.request(method, url, headers=headers).status_code
                        for name, headers in keys.items()
                    }
                    want_401 = guarded(route.path)
                    if (seen["none"] == 401) != want_401 or (seen["wrong"] == 401) != want_401:
                        wrong.append(f"{method} {prefix}{route.path}: {seen}")
                    if seen["key"] == 401:
                        wrong.append(f"{method} {prefix}{route.path}: 401 with the key")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    ("authorization", "accepted"),
    [
        (f"Bearer {KEY}", True),
        (f"bearer {KEY}", True),  # the scheme is case-insensitive, as in vLLM
        (f"Basic {KEY}", False),
        (f"Bearer {KEY}x", False),
        (f"Bearer {KEY[:-1]}", False),
        ("", False),
    ],
)
def test_authorization_header_forms(authorization: str, accepted: bool) -> None:
    middleware = APIKeyMiddleware(app=None, api_key=["other", KEY])
    assert middleware._accepts(authorization.encode()) is accepted
