"""render -> generate -> derender on the real engine and the embedded demo model (greedy):
the pipeline's answer is the plain route's, and generate's id-keyed logprobs are the
completions route's numbers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from actorllm.engine import AsyncEngine
from actorllm.entrypoints.openai.app import AppSettings, build_app
from tests.entrypoints.server_thread import ServerThread

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real() -> Iterator[ServerThread]:
    settings = AppSettings(log_interval_s=0, enable_scale_out=True)
    app = build_app(lambda: AsyncEngine.open(None, max_model_len=256), settings)
    srv = ServerThread(app).start(timeout_s=240)
    yield srv
    srv.stop()
    assert srv.error is None


def post(srv: ServerThread, path: str, body: Any) -> Any:
    r = httpx.post(srv.url + path, json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def _strip(answer: dict[str, Any]) -> dict[str, Any]:
    # derender also passes on the generate response's connector state and metrics
    for key in ("id", "created", "system_fingerprint", "kv_transfer_params", "metrics"):
        answer.pop(key, None)
    answer["usage"].pop("prompt_tokens_details", None)
    return answer


@pytest.mark.parametrize("stream", [False, True])
def test_chat_round_trip_is_the_plain_answer(real: ServerThread, stream: bool) -> None:
    body = {"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 8,
            "temperature": 0, "logprobs": True, "top_logprobs": 2}  # fmt: skip
    plain = post(real, "/v1/chat/completions", body)
    rendered = post(real, "/v1/chat/completions/render", {**body, "stream": stream})
    gen: dict[str, Any]
    if stream:  # the whole response assembled from generate's chunks
        r = httpx.post(real.url + "/inference/v1/generate", json=rendered, timeout=120)
        events = [json.loads(ln[6:]) for ln in r.text.splitlines()
                  if ln.startswith("data: ") and ln != "data: [DONE]"]  # fmt: skip
        choice = {"index": 0, "token_ids": [], "logprobs": {"content": []}}
        for e in events:
            c = e["choices"][0]
            choice["token_ids"] += c["token_ids"]
            choice["logprobs"]["content"] += c["logprobs"]["content"]
            choice["finish_reason"], choice["stop_reason"] = c["finish_reason"], c["stop_reason"]
        gen = {"request_id": events[0]["request_id"], "choices": [choice]}
    else:
        gen = post(real, "/inference/v1/generate", rendered)
    derendered = post(real, "/v1/chat/completions/derender", {
        "generate_response": gen, "prompt_tokens": len(rendered["token_ids"]),
        "prompt_token_ids": rendered["token_ids"], "chat_request": body,
    })  # fmt: skip
    assert _strip(derendered) == _strip(plain)


def test_completion_round_trip_and_logprobs(real: ServerThread) -> None:
    body = {"prompt": "Once upon a time", "max_tokens": 6, "temperature": 0, "logprobs": 1}
    plain = post(real, "/v1/completions", body)
    (rendered,) = post(real, "/v1/completions/render", body)
    gen = post(real, "/inference/v1/generate", rendered)
    want = plain["choices"][0]["logprobs"]["token_logprobs"]
    got = [c["logprob"] for c in gen["choices"][0]["logprobs"]["content"]]
    assert got == pytest.approx(want)
    derendered = post(real, "/v1/completions/derender", {
        "generate_responses": [gen], "prompt_tokens": [len(rendered["token_ids"])],
        "prompt_token_ids": [rendered["token_ids"]], "completion_request": body,
    })  # fmt: skip
    assert _strip(derendered) == _strip(plain)
