"""``/inference/v1/generate`` under ``--return-sampling-mask --logprobs-mode
processed_logprobs`` (vLLM's ``test_generate_sampling_mask``, on a tiny random Llama, trio
and asyncio servers): one mask per token, holding it, and exactly the tokens whose
processed logprob is finite; streamed chunks carry their own tokens' masks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from actorllm.engine import AsyncEngine
from actorllm.entrypoints.openai.app import AppSettings, build_app
from tests.engine.conftest import _tiny_llama
from tests.entrypoints.server_thread import ServerThread

GEN = "/inference/v1/generate"
ENGINE: dict[str, Any] = {
    "max_model_len": 256,
    "kv_cache_memory_bytes": 8 * 2**20,
    "return_sampling_mask": True,
    "logprobs_mode": "processed_logprobs",
}
TOP_K = 5
BODY: dict[str, Any] = {
    "token_ids": [1, 2, 3],
    "sampling_params": {"max_tokens": 5, "temperature": 0.8, "top_k": TOP_K, "top_p": 0.9,
                        "ignore_eos": True, "seed": 0, "logprobs": TOP_K},
}  # fmt: skip


@pytest.fixture(scope="module", params=["trio", "asyncio"])
def server(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[ServerThread]:
    path = _tiny_llama(tmp_path_factory.mktemp("tiny-llama"), seed=0)
    app = build_app(
        lambda: AsyncEngine.open(path, **ENGINE),
        AppSettings(log_interval_s=0, enable_scale_out=True),
    )
    srv = ServerThread(app, worker_class=request.param).start(timeout_s=240)
    yield srv
    srv.stop()
    assert srv.error is None


def _check(token_ids: list[int], masks: list[list[int]], content: list[Any]) -> None:
    assert len(masks) == len(token_ids) == len(content)
    for token_id, support, entry in zip(token_ids, masks, content, strict=True):
        assert token_id in support and support == sorted(set(support))
        for top in entry["top_logprobs"]:
            assert (top["token_id"] in support) == (top["logprob"] > -9999.0)


def test_whole_answer_has_a_mask_per_token(server: ServerThread) -> None:
    r = httpx.post(server.url + GEN, json=BODY, timeout=120)
    assert r.status_code == 200, r.text
    (choice,) = r.json()["choices"]
    assert len(choice["token_ids"]) == 5
    _check(choice["token_ids"], choice["sampling_mask"], choice["logprobs"]["content"])


def test_stream_chunks_carry_their_tokens_masks(server: ServerThread) -> None:
    whole = httpx.post(server.url + GEN, json=BODY, timeout=120).json()["choices"][0]
    r = httpx.post(server.url + GEN, json={**BODY, "stream": True}, timeout=120)
    events = [json.loads(ln[6:]) for ln in r.text.splitlines()
              if ln.startswith("data: ") and ln != "data: [DONE]"]  # fmt: skip
    tokens: list[int] = []
    masks: list[list[int]] = []
    for e in events:
        c = e["choices"][0]
        assert len(c["sampling_mask"] or []) == len(c["token_ids"])
        tokens += c["token_ids"]
        masks += c["sampling_mask"] or []
    assert (tokens, masks) == (whole["token_ids"], whole["sampling_mask"])


def test_a_greedy_request_is_refused(server: ServerThread) -> None:
    body = {**BODY, "sampling_params": {**BODY["sampling_params"], "temperature": 0}}
    r = httpx.post(server.url + GEN, json=body, timeout=120)
    assert r.status_code == 400
    assert "requires temperature > 0" in r.text
