"""``--max-logprobs`` and ``logprobs=-1`` over HTTP (the fake engine records what it was
asked): vLLM's limit (20 by default; -1: the whole vocabulary), vLLM's message above it,
and -1 as the vocabulary size (vllm/sampling_params.py, ``_validate_logprobs``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import FakeEngine

USER = [{"role": "user", "content": "hi"}]


def serve(max_logprobs: int) -> Iterator[tuple[httpx.Client, FakeEngine]]:
    fake = FakeEngine(max_model_len=64, max_logprobs=max_logprobs)
    srv = start_server(fake)
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        yield c, fake
    srv.stop()


@pytest.fixture(scope="module")
def default() -> Iterator[tuple[httpx.Client, FakeEngine]]:
    yield from serve(20)


@pytest.fixture(scope="module")
def unlimited() -> Iterator[tuple[httpx.Client, FakeEngine]]:
    yield from serve(-1)


@pytest.fixture(scope="module")
def fifty() -> Iterator[tuple[httpx.Client, FakeEngine]]:
    yield from serve(50)


def post(http: httpx.Client, path: str, body: dict[str, Any], status: int = 200) -> Any:
    r = http.post(path, json=body)
    assert r.status_code == status, r.text
    return r.json()


def completion(http: httpx.Client, status: int = 200, **fields: Any) -> Any:
    return post(http, "/v1/completions", {"prompt": "x", "max_tokens": 1, **fields}, status)


def chat(http: httpx.Client, status: int = 200, **fields: Any) -> Any:
    return post(http, "/v1/chat/completions", {"messages": USER, "max_tokens": 1, **fields}, status)


def test_above_the_default_limit_is_vllms_400(default: tuple[httpx.Client, FakeEngine]) -> None:
    http, fake = default
    err = completion(http, 400, logprobs=21)["error"]
    assert (
        err["message"] == "Requested sample logprobs of 21, which is greater than max allowed: 20"
    )
    assert err["param"] == "logprobs"
    err = chat(http, 400, logprobs=True, top_logprobs=21)["error"]
    assert err["message"].startswith("Requested sample logprobs of 21,")
    err = completion(http, 400, prompt_logprobs=-1)["error"]
    assert err["message"] == (
        f"Requested prompt logprobs of {fake.vocab_size}, which is greater than max allowed: 20"
    )
    assert err["param"] == "prompt_logprobs"
    err = completion(http, 400, logprobs=-1)["error"]
    assert err["message"].startswith(f"Requested sample logprobs of {fake.vocab_size},")
    completion(http, logprobs=20)
    chat(http, logprobs=True, top_logprobs=20)


def test_a_higher_limit_is_served(fifty: tuple[httpx.Client, FakeEngine]) -> None:
    http, _ = fifty
    out = completion(http, logprobs=30)
    assert len(out["choices"][0]["logprobs"]["top_logprobs"][0]) >= 30
    out = chat(http, logprobs=True, top_logprobs=30)
    assert len(out["choices"][0]["logprobs"]["content"][0]["top_logprobs"]) == 30
    assert "50" in completion(http, 400, logprobs=51)["error"]["message"]


def test_minus_one_is_the_whole_vocabulary(unlimited: tuple[httpx.Client, FakeEngine]) -> None:
    http, fake = unlimited
    completion(http, logprobs=-1)
    assert fake.last_request is not None
    assert fake.last_request[1].logprobs == fake.vocab_size
    out = chat(http, logprobs=True, top_logprobs=-1)
    assert fake.last_request[1].logprobs == fake.vocab_size
    top = out["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    assert len(top) == fake.vocab_size
    completion(http, prompt_logprobs=-1)
    assert fake.last_request[1].prompt_logprobs == fake.vocab_size
    # echo with logprobs=-1 asks the prompt's whole vocabulary too (not max(-1, k)).
    completion(http, echo=True, logprobs=-1, prompt_logprobs=2)
    assert fake.last_request[1].prompt_logprobs == fake.vocab_size


def test_below_minus_one_is_refused(unlimited: tuple[httpx.Client, FakeEngine]) -> None:
    http, _ = unlimited
    assert completion(http, 400, logprobs=-2)["error"]["param"] == "logprobs"
    assert chat(http, 400, logprobs=True, top_logprobs=-2)["error"]["param"] == "top_logprobs"


def test_the_document_states_the_limit(
    default: tuple[httpx.Client, FakeEngine], unlimited: tuple[httpx.Client, FakeEngine]
) -> None:
    vocab = default[1].vocab_size
    for (http, _), bounds in ((default, (0, 20)), (unlimited, (-1, vocab))):
        doc = http.get("/openapi.json").json()
        prop = doc["components"]["schemas"]["CompletionRequest"]["properties"]["logprobs"]
        bound = next(p for p in prop["anyOf"] if p.get("type") == "integer")
        assert (bound["minimum"], bound["maximum"]) == bounds


def test_top_logprobs_needs_logprobs_unless_zero(default: tuple[httpx.Client, FakeEngine]) -> None:
    http, _ = default
    err = chat(http, 400, top_logprobs=2)["error"]
    assert err["message"] == "when using `top_logprobs`, `logprobs` must be set to true."
    assert err["param"] == "top_logprobs"
    chat(http, top_logprobs=0)  # vLLM: 0 asks for nothing, so it needs nothing
