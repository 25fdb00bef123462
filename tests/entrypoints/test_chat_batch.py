"""vLLM 0.32's ``POST /v1/chat/completions/batch``: several conversations, one answer whose
choice ``i`` answers conversation ``i``; streaming, tools and ``n > 1`` refused by name."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import SCRIPT, FakeEngine
from tests.entrypoints.server_thread import ServerThread

URL = "/v1/chat/completions/batch"
A = [{"role": "user", "content": "first"}]
B = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "second"}]


@pytest.fixture(scope="module")
def engine() -> FakeEngine:
    return FakeEngine(token_delay_s=0.001)


@pytest.fixture(scope="module")
def http(engine: FakeEngine) -> Iterator[httpx.Client]:
    srv: ServerThread = start_server(engine)
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        yield c
    srv.stop()
    assert srv.error is None


def post(http: httpx.Client, status: int = 200, **body: Any) -> dict[str, Any]:
    r = http.post(URL, json=body)
    assert r.status_code == status, r.text
    out: dict[str, Any] = r.json()
    return out


def test_one_choice_per_conversation(http: httpx.Client, engine: FakeEngine) -> None:
    out = post(http, messages=[A, B], max_tokens=3, request_id="r1")
    assert out["object"] == "chat.completion" and out["model"] == "fake-model"
    assert [c["index"] for c in out["choices"]] == [0, 1]
    text = "".join(" " + w for w in SCRIPT[:3])
    assert [c["message"]["content"] for c in out["choices"]] == [text, text]
    assert all(c["finish_reason"] == "length" for c in out["choices"])
    usage = out["usage"]
    assert usage["completion_tokens"] == 6
    assert usage["total_tokens"] == usage["prompt_tokens"] + 6
    assert usage["prompt_tokens_details"] is None  # (test_openai_server: with the flag)
    assert {"chatcmpl-r1_0", "chatcmpl-r1_1"} <= set(engine.finished)  # vLLM's sub ids


def test_fields_apply_to_every_conversation(http: httpx.Client, engine: FakeEngine) -> None:
    out = post(http, messages=[A, A], max_tokens=5, logprobs=True, top_logprobs=1, stop=["fox"])
    for c in out["choices"]:
        assert c["message"]["content"] == " the quick brown " and c["finish_reason"] == "stop"
        assert len(c["logprobs"]["content"]) == 4
    assert engine.last_request[1].logprobs == 1  # type: ignore[index]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"stream": True}, "stream"),
        ({"n": 2}, "n"),
        (
            {"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none"},
            "tools",
        ),
        ({"use_beam_search": True}, "use_beam_search"),
        ({"messages": []}, "messages"),
        ({"messages": [[]]}, "messages"),
    ],
)
def test_refused_by_name(http: httpx.Client, body: dict[str, Any], param: str) -> None:
    err = post(http, 400, **{"messages": [A], **body})["error"]
    assert err["param"] == param, err


def test_a_bad_conversation_fails_the_batch_and_leaves_nothing_running(
    http: httpx.Client, engine: FakeEngine
) -> None:
    long = [{"role": "user", "content": "word " * 200}]
    err = post(http, 400, messages=[A, long, B], max_tokens=2)["error"]
    assert err["param"] == "messages" and "maximum context length" in err["message"]
    assert engine.open == set()
