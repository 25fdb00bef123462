"""``/inference/v1/generate`` and ``/inference/v1/abort_requests`` over HTTP (trio and
asyncio servers, fake engine): vLLM's token-in/token-out answers, whole and streamed,
logprobs by token id, ``output_mode`` text, and refusals with vLLM's statuses."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from actorllm.core.sampling_params import RequestOutputKind
from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import FakeEngine
from tests.entrypoints.server_thread import ServerThread

GEN = "/inference/v1/generate"
RESPONSE_KEYS = ["request_id", "model", "created", "usage", "prompt_logprobs",
                 "prompt_token_id_logprobs", "prompt_token_ids", "mm_placeholders", "metrics",
                 "kv_transfer_params", "ec_transfer_params", "output_mode", "choices"]  # fmt: skip
CHOICE_KEYS = ["index", "finish_reason", "stop_reason", "token_ids", "routed_experts",
               "sampling_mask", "weight_versions", "logprobs"]  # fmt: skip


@pytest.fixture(scope="module")
def engine() -> FakeEngine:
    return FakeEngine(token_delay_s=0.001)


def generate(server: ServerThread, body: dict[str, Any], **kw: Any) -> httpx.Response:
    return httpx.post(server.url + GEN, json=body, timeout=30, **kw)


def chunks(server: ServerThread, body: dict[str, Any]) -> list[dict[str, Any]]:
    r = generate(server, {**body, "stream": True})
    assert r.status_code == 200, r.text
    lines = [ln[len("data: ") :] for ln in r.text.splitlines() if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(ln) for ln in lines[:-1]]


def test_whole_answer(server: ServerThread, engine: FakeEngine) -> None:
    body = {"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 5}, "request_id": "q"}
    r = generate(server, body)
    assert r.status_code == 200, r.text
    got = r.json()
    assert list(got) == RESPONSE_KEYS and list(got["choices"][0]) == CHOICE_KEYS
    assert got["request_id"] == "generate-tokens-q" and got["output_mode"] == "tokens"
    (choice,) = got["choices"]
    assert len(choice["token_ids"]) == 5 and choice["finish_reason"] == "length"
    assert got["usage"]["prompt_tokens"] == 3 and got["usage"]["completion_tokens"] == 5
    assert engine.last_request is not None
    prompt, params, _ = engine.last_request
    assert isinstance(prompt, dict) and prompt["prompt_token_ids"] == [1, 2, 3]
    assert params.output_kind == RequestOutputKind.FINAL_ONLY
    assert engine.last_reasoning_ended is None


def test_reasoning_ended_reaches_the_engine(server: ServerThread, engine: FakeEngine) -> None:
    """vLLM's field (what /render resolved): where structured outputs start."""
    body = {"token_ids": [1, 2], "sampling_params": {"max_tokens": 1}, "reasoning_ended": True}
    assert generate(server, body).status_code == 200
    assert engine.last_reasoning_ended is True


def test_max_tokens_left_out_is_the_room_left(server: ServerThread, engine: FakeEngine) -> None:
    r = generate(server, {"token_ids": [1, 2, 3], "sampling_params": {"temperature": 0.0}})
    assert r.status_code == 200, r.text
    assert engine.last_request is not None
    assert engine.last_request[1].max_tokens == 64 - 3  # the fake engine's context
    assert len(r.json()["choices"][0]["token_ids"]) > 16


def test_n_choices_and_return_token_ids(server: ServerThread) -> None:
    body = {"token_ids": [4, 5], "sampling_params": {"max_tokens": 2, "n": 3},
            "return_token_ids": True}  # fmt: skip
    got = generate(server, body).json()
    assert sorted(c["index"] for c in got["choices"]) == [0, 1, 2]
    assert got["prompt_token_ids"] == [4, 5]


def test_stream_matches_whole(server: ServerThread) -> None:
    body = {"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 4, "temperature": 0.0},
            "stream_options": {"include_usage": True}, "return_token_ids": True}  # fmt: skip
    got = chunks(server, body)
    *token_chunks, usage = got
    ids = [t for c in token_chunks for t in c["choices"][0]["token_ids"]]
    assert token_chunks[0]["prompt_token_ids"] == [1, 2, 3]
    assert "prompt_token_ids" not in token_chunks[1] and "metrics" not in token_chunks[0]
    assert token_chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in token_chunks[:-1])
    counts = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    assert usage == {
        "request_id": usage["request_id"],
        "usage": counts,
        "output_mode": "tokens",
        "choices": [],
    }
    whole = generate(server, {**body, "stream": False}).json()
    assert whole["choices"][0]["token_ids"] == ids


@pytest.mark.parametrize("k", [0, 1, 3])
def test_logprobs_by_token_id(server: ServerThread, k: int) -> None:
    body = {"token_ids": [1, 2], "sampling_params": {"max_tokens": 3, "logprobs": k}}
    (choice,) = generate(server, body).json()["choices"]
    content = choice["logprobs"]["content"]
    assert [c["token_id"] for c in content] == choice["token_ids"]
    for c in content:
        assert c["logprob"] == -0.5 and c["rank"] == 1
        assert len(c["top_logprobs"]) == max(k, 1)
        assert c["top_logprobs"][0]["token_id"] == c["token_id"]


def test_text_mode(server: ServerThread) -> None:
    body = {"token_ids": [1, 2], "sampling_params": {"max_tokens": 3, "logprobs": 1},
            "output_mode": "text"}  # fmt: skip
    got = generate(server, body).json()
    assert got["output_mode"] == "text"
    (choice,) = got["choices"]
    assert choice["text"].strip() and isinstance(choice["logprobs"]["content"][0]["token"], str)
    streamed = chunks(server, body)
    assert "".join(c["choices"][0]["text"] for c in streamed) == choice["text"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"token_ids": [], "sampling_params": {}}, None),
        ({"token_ids": [-1], "sampling_params": {}}, None),
        ({"token_ids": [10**7], "sampling_params": {}}, "token_ids"),
        ({"token_ids": [1], "sampling_params": {"nope": 1}}, "sampling_params.nope"),
        ({"token_ids": [1], "sampling_params": {"temperature": -1}}, None),
        ({"token_ids": [1], "sampling_params": {"max_tokens": None, "min_tokens": 2**31}},
         "sampling_params.min_tokens"),
        ({"token_ids": [1], "sampling_params": {}, "features": {"mm_hashes": {}}}, "features"),
        ({"token_ids": [1], "sampling_params": {},
          "content_parts": [{"type": "image_url", "url": "x"}]}, "content_parts"),
        ({"token_ids": [1], "sampling_params": {"detokenize": False}, "output_mode": "text"},
         "output_mode"),
        ({"token_ids": [1], "sampling_params": {"n": 10**6}}, "sampling_params.n"),
        ({"token_ids": [1], "sampling_params": {"stop": ["x"], "detokenize": False}},
         "sampling_params.stop"),
        ({"token_ids": [1]}, None),
    ],
)  # fmt: skip
def test_bad_requests_are_400(
    server: ServerThread, body: dict[str, Any], param: str | None
) -> None:
    r = generate(server, body)
    assert r.status_code == 400, r.text
    if param is not None:
        assert r.json()["error"]["param"] == param


def test_unknown_model_404(server: ServerThread) -> None:
    r = generate(server, {"token_ids": [1], "sampling_params": {}, "model": "nope"})
    assert r.status_code == 404


def test_abort_requests(server: ServerThread, engine: FakeEngine) -> None:
    r = httpx.post(server.url + "/inference/v1/abort_requests", json={"request_ids": ["a"]})
    assert r.status_code == 200 and r.content == b""
    r = httpx.post(server.url + "/inference/v1/abort_requests", json={})
    assert r.status_code == 400


def test_api_key_guards_the_routes(engine: FakeEngine) -> None:
    srv = start_server(engine, enable_scale_out=True, api_key="k")
    try:
        body = {"token_ids": [1], "sampling_params": {"max_tokens": 1}}
        assert httpx.post(srv.url + GEN, json=body).status_code == 401
        ok = httpx.post(srv.url + GEN, json=body, headers={"Authorization": "Bearer k"})
        assert ok.status_code == 200
        render = httpx.post(srv.url + "/v1/completions/render", json={"prompt": "a"})
        assert render.status_code == 401
    finally:
        srv.stop()


def test_tokens_only(engine: FakeEngine) -> None:
    """vLLM's --tokens-only: the scale-out routes and /abort_requests without
    --enable-scale-out; generate never detokenizes, so stop strings and text are refused."""
    srv = start_server(engine, tokens_only=True)
    try:
        body = {"token_ids": [1, 2], "sampling_params": {"max_tokens": 2}}
        assert generate(srv, body).status_code == 200
        assert engine.last_request is not None and engine.last_request[1].detokenize is False
        stop = generate(srv, {**body, "sampling_params": {"stop": ["x"]}})
        assert stop.status_code == 400
        assert stop.json()["error"]["param"] == "sampling_params.stop"
        text = generate(srv, {**body, "output_mode": "text"})
        assert text.status_code == 400 and text.json()["error"]["param"] == "output_mode"
        abort = httpx.post(srv.url + "/abort_requests", json={"request_ids": ["x"]})
        assert abort.status_code == 200
    finally:
        srv.stop()


def test_generate_counts_in_the_server_load(engine: FakeEngine) -> None:
    srv = start_server(engine, enable_scale_out=True, enable_server_load_tracking=True)
    try:
        body = {"token_ids": [1, 2], "sampling_params": {"max_tokens": 2}}
        assert generate(srv, body).status_code == 200
        assert httpx.get(srv.url + "/load").json() == {"server_load": 0}  # back to 0 after
    finally:
        srv.stop()
