"""SageMaker's stateful sessions: opened and closed by ``/invocations`` bodies, the
library's codes and messages (vLLM's clients read them), and over HTTP beside the
requests that name a session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import pytest

from actorllm.entrypoints.openai.errors import APIError
from actorllm.entrypoints.openai.sagemaker_sessions import (
    CLOSED_SESSION_HEADER,
    ENABLE_ENV,
    NEW_SESSION_HEADER,
    SESSION_HEADER,
    Sessions,
)
from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import FakeEngine
from tests.entrypoints.server_thread import ServerThread

NEW = {"requestType": "NEW_SESSION"}
CLOSE = {"requestType": "CLOSE"}


def _open(sessions: Sessions) -> str:
    answer = sessions.handle(NEW, None)
    assert answer is not None
    sid, expires = answer.headers[NEW_SESSION_HEADER].split("; Expires=")
    assert answer.text == f"Session {sid} created" and expires.endswith("Z")
    return sid


def _status(sessions: Sessions, body: object, sid: str | None) -> tuple[int, str]:
    with pytest.raises(APIError) as info:
        sessions.handle(body, sid)
    return info.value.status, info.value.message


def test_a_session_opens_serves_requests_and_closes() -> None:
    sessions = Sessions(enabled=True)
    sid = _open(sessions)
    assert sessions.handle({"prompt": "hi"}, sid) is None  # goes on to the model
    closed = sessions.handle(CLOSE, sid)
    assert closed is not None and closed.headers == {CLOSED_SESSION_HEADER: sid}
    assert closed.text == f"Session {sid} closed"
    assert _status(sessions, {"prompt": "hi"}, sid) == (
        400,
        f"Bad request: session not found: {sid}",
    )


def test_the_library_codes() -> None:
    sessions = Sessions(enabled=True)
    assert _status(sessions, {**NEW, "extra": 1}, None)[0] == 400
    assert _status(sessions, {"requestType": "OPEN"}, None)[0] == 400
    assert _status(sessions, CLOSE, "nope") == (400, "Bad request: session not found: nope")
    assert _status(sessions, CLOSE, None) == (
        424, "Failed to close session: invalid session_id: None",
    )  # fmt: skip
    assert sessions.handle({"prompt": "hi"}, None) is None  # no session: as usual


def test_an_expired_session_is_gone() -> None:
    now = [100.0]
    sessions = Sessions(enabled=True, expiration_s=10, clock=lambda: now[0])
    sid = _open(sessions)
    now[0] = 111.0
    assert sessions.handle({"prompt": "hi"}, sid) is None  # as without a session
    assert sessions.statistics()["open"] == 0
    assert _status(sessions, CLOSE, sid)[0] == 400


def test_sessions_off_refuse_session_requests_and_headers() -> None:
    sessions = Sessions(enabled=False)
    assert _status(sessions, NEW, None) == (400, "Invalid payload. stateful sessions not enabled")
    assert _status(sessions, {"prompt": "hi"}, "s")[0] == 400
    assert sessions.handle({"prompt": "hi"}, None) is None


@pytest.fixture(scope="module", params=["trio", "asyncio"])
def server(request: pytest.FixtureRequest, engine: FakeEngine) -> Iterator[ServerThread]:
    os.environ[ENABLE_ENV] = "true"  # read as the app is built
    try:
        srv = start_server(engine, worker_class=request.param)
    finally:
        del os.environ[ENABLE_ENV]
    yield srv
    srv.stop()
    assert srv.error is None


def test_sessions_over_http(server: ServerThread) -> None:
    url = server.url + "/invocations"
    opened = httpx.post(url, json=NEW)
    assert opened.status_code == 200
    sid = opened.headers[NEW_SESSION_HEADER].split(";")[0]
    body = {"prompt": "hi", "max_tokens": 2}
    assert httpx.post(url, json=body, headers={SESSION_HEADER: sid}).status_code == 200
    unknown = httpx.post(url, json=CLOSE, headers={SESSION_HEADER: "nope"})
    assert unknown.status_code == 400
    assert "session not found" in unknown.json()["error"]["message"]
    assert httpx.post(url, json=CLOSE).status_code == 424
    closed = httpx.post(url, json=CLOSE, headers={SESSION_HEADER: sid})
    assert closed.status_code == 200 and closed.headers[CLOSED_SESSION_HEADER] == sid
