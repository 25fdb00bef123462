"""``POST /generative_scoring`` on a real hypercorn server over the fake engine (trio and
asyncio servers): the response's shape, ids and usage, both normalisations of the label
logprobs the engine reports, how prompts are built and cut, and every refusal by status
and message (vLLM's words, which its tests match)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import FakeEngine
from tests.entrypoints.server_thread import ServerThread

MAX_LEN = 64
# Labels none of the fake's scripted tokens: it reports label r at logprob -1 - r.
LABELS = [3000, 3001, 3002]
FAKE_LOGPROBS = [-1.0, -2.0, -3.0]


@pytest.fixture(scope="module")
def engine() -> FakeEngine:
    fake = FakeEngine(max_model_len=MAX_LEN)
    assert not {tid for _, tid in fake._words} & set(LABELS)
    return fake


@pytest.fixture(scope="module", params=["trio", "asyncio"])
def srv(engine: FakeEngine, request: pytest.FixtureRequest) -> Iterator[ServerThread]:
    server = start_server(engine, worker_class=request.param)
    yield server
    server.stop()
    assert server.error is None


def post(srv: ServerThread, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(srv.url + "/generative_scoring", json=body, headers=headers, timeout=30)


def body(**fields: Any) -> dict[str, Any]:
    return {"query": "Is Paris a capital? ", "items": ["Paris", "Rome"], "label_token_ids": LABELS,
            **fields}  # fmt: skip


def test_response_shape_ids_and_usage(srv: ServerThread, engine: FakeEngine) -> None:
    r = post(srv, body(model="fake-model"))
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["id"].startswith("generative-scoring-") and got["object"] == "list"
    assert got["model"] == "fake-model" and isinstance(got["created"], int)
    assert [(d["index"], d["object"]) for d in got["data"]] == [(0, "score"), (1, "score")]
    tok = engine.tokenizer
    query = tok.encode("Is Paris a capital? ")
    prompts = [query + tok.encode(t, add_special_tokens=False) for t in ("Paris", "Rome")]
    usage = got["usage"]
    assert usage["prompt_tokens"] == sum(map(len, prompts))
    assert usage["completion_tokens"] == 2  # one generated token per item
    assert usage["total_tokens"] == usage["prompt_tokens"] + 2
    assert usage["prompt_tokens_details"] is None
    # The engine was asked for one token and the labels' logprobs, on the last prompt
    assert engine.last_request is not None
    prompt, params, _ = engine.last_request
    assert isinstance(prompt, dict) and prompt["prompt_token_ids"] in prompts
    assert params.max_tokens == 1 and params.n == 1
    assert params.logprob_token_ids == LABELS and params.logprobs == len(LABELS)


def test_x_request_id_then_the_body_names_the_response(srv: ServerThread) -> None:
    assert post(srv, body(request_id="mine")).json()["id"] == "generative-scoring-mine"
    r = post(srv, body(request_id="mine"), **{"X-Request-Id": "header"})
    assert r.json()["id"] == "generative-scoring-header"


def test_scores_over_the_labels_and_over_the_vocabulary(srv: ServerThread) -> None:
    over_labels = post(srv, body()).json()["data"]
    total = sum(math.exp(lp) for lp in FAKE_LOGPROBS)
    assert over_labels[0]["score"] == pytest.approx(math.exp(-1.0) / total, rel=1e-12)
    over_vocab = post(srv, body(apply_softmax=False)).json()["data"]
    assert over_vocab[0]["score"] == pytest.approx(math.exp(-1.0), rel=1e-12)
    # A label named twice counts once (vLLM keys the labels by id); the fake reports the
    # third, LABELS[1], at -3 here.
    twice = post(srv, body(label_token_ids=[LABELS[0], LABELS[0], LABELS[1]])).json()["data"]
    assert twice[0]["score"] == pytest.approx(1 / (1 + math.exp(-2.0)), rel=1e-12)


def test_token_prompts_item_first_and_the_cut(srv: ServerThread, engine: FakeEngine) -> None:
    r = post(srv, {"query": [5, 6], "items": [[7, 8]], "label_token_ids": [9], "item_first": True})
    assert r.status_code == 200 and r.json()["data"][0]["score"] == pytest.approx(1.0)
    assert engine.last_request is not None
    assert engine.last_request[0]["prompt_token_ids"] == [7, 8, 5, 6]  # type: ignore[index]
    long = list(range(10, 10 + MAX_LEN + 5))
    r = post(srv, {"query": long, "items": [[1, 2]], "label_token_ids": [9]})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == MAX_LEN - 1
    assert engine.last_request[0]["prompt_token_ids"] == long[: MAX_LEN - 1]  # type: ignore[index]


def test_query_special_tokens_and_the_cache_salt(srv: ServerThread, engine: FakeEngine) -> None:
    r = post(srv, body(items=["x"], add_special_tokens=False, cache_salt="tenant-a"))
    assert r.status_code == 200
    assert engine.last_request is not None
    prompt = engine.last_request[0]
    assert isinstance(prompt, dict) and prompt["cache_salt"] == "tenant-a"
    assert "cache_salt" not in post_prompt(srv, engine, body(items=["x"]))


def post_prompt(srv: ServerThread, engine: FakeEngine, b: dict[str, Any]) -> dict[str, Any]:
    assert post(srv, b).status_code == 200
    assert engine.last_request is not None and isinstance(engine.last_request[0], dict)
    return engine.last_request[0]


REFUSALS = [
    (
        body(label_token_ids=[9999999999, 9999999998]),
        400,
        "label_token_id 9999999999 is out of vocabulary range [0, 4096)",
    ),
    (body(label_token_ids=[-1]), 400, "out of vocabulary range"),
    (body(label_token_ids=[]), 400, "label_token_ids must contain at least one token ID."),
    (body(items=[]), 400, "items must contain at least one item."),
    ({"query": "q", "items": ["a"]}, 400, "label_token_ids"),  # missing
    (body(items=["a", [1, 2]]), 400, "items must be all strings or all lists of token ids"),
    (body(items="a"), 400, "items"),
    (body(query=5), 400, "query"),
    (body(apply_softmax="yes"), 400, "apply_softmax"),
    (
        body(label_token_ids=list(range(21))),
        400,
        "Requested sample logprobs of 21, which is greater than max allowed: 20",
    ),
    (body(priority=1), 400, "priority scheduling is not enabled"),
    (body(query=[99999]), 400, "out of vocabulary"),
    (body(query="", items=[""]), 400, "The decoder prompt cannot be empty"),
    (body(cache_salt="a/b"), 400, "must not contain '@', '/'"),
    (body(cache_salt=""), 400, "cache_salt"),
    (body(model="other"), 404, "The model `other` does not exist."),
]


@pytest.mark.parametrize(("sent", "status", "message"), REFUSALS)
def test_refusals(srv: ServerThread, sent: dict[str, Any], status: int, message: str) -> None:
    r = post(srv, sent)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert message in error["message"] and error["code"] == status


def test_not_json_and_not_an_object(srv: ServerThread) -> None:
    json_type = {"content-type": "application/json"}
    r = httpx.post(srv.url + "/generative_scoring", content=b"{", headers=json_type, timeout=30)
    assert r.status_code == 400 and "Unsupported Media Type" not in r.text
    r = httpx.post(srv.url + "/generative_scoring", json=[1], timeout=30)
    assert r.status_code == 400
