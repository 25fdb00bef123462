"""The exception -> HTTP error mapping (entrypoints/openai/errors.py)."""

from __future__ import annotations

import json

from actorllm.engine.errors import EngineDeadError, EngineOverloadedError, SlowConsumerError
from actorllm.entrypoints.openai.errors import to_api_error


def test_an_overloaded_engine_is_503_with_retry_after_in_whole_seconds() -> None:
    response = to_api_error(EngineOverloadedError("the waiting queue is full", 2.2)).response()
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "3"
    body = json.loads(bytes(response.body))
    assert body["error"]["type"] == "ServiceUnavailableError"
    assert "waiting queue is full" in body["error"]["message"]
    assert to_api_error(EngineOverloadedError("x", 0.0)).response().headers["Retry-After"] == "1"


def test_a_dead_engine_is_503_without_retry_after() -> None:
    response = to_api_error(EngineDeadError("gone")).response()
    assert response.status_code == 503 and "Retry-After" not in response.headers


def test_a_slow_consumer_is_408() -> None:
    response = to_api_error(SlowConsumerError("r1", 4096)).response()
    assert response.status_code == 408 and b"4096 outputs unread" in bytes(response.body)
