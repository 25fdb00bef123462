"""Routed experts over HTTP (--enable-return-routed-experts): a whole completion's and
chat completion's choice carries the base64 ``np.save`` of [prompt + output - 1, layers,
top_k], the HF reference routers' experts under greedy decoding (vLLM's
tests/entrypoints/rl/return_routed_experts/test_openai_api.py)."""

import base64
import io

import httpx
import numpy as np
import pytest

from tests.engine.test_routed_experts import SMALL, hf_routing, same_sets, tiny_mixtral
from tests.entrypoints.conftest import real_server


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = tiny_mixtral(tmp_path_factory.mktemp("tiny-mixtral-http"))
    with real_server(path, enable_return_routed_experts=True, **SMALL) as srv:
        yield str(path), srv


def decode(encoded: str) -> np.ndarray:
    return np.load(io.BytesIO(base64.b64decode(encoded)))


def test_completion_choice_carries_the_routed_experts(served):
    path, srv = served
    body = {"model": path, "prompt": [5, 17, 300, 42], "max_tokens": 5, "temperature": 0,
            "return_token_ids": True}  # fmt: skip
    r = httpx.post(f"{srv.url}/v1/completions", json=body, timeout=120)
    r.raise_for_status()
    data = r.json()
    choice = data["choices"][0]
    routed = decode(choice["routed_experts"])
    assert routed.dtype == np.uint8
    assert len(routed) == data["usage"]["prompt_tokens"] + len(choice["token_ids"]) - 1
    ref = hf_routing(path, choice["prompt_token_ids"] + choice["token_ids"][:-1])
    assert same_sets(routed, ref)


def test_chat_choice_carries_them_and_streams_do_not(served):
    path, srv = served
    body = {"model": path, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
            "temperature": 0}  # fmt: skip
    r = httpx.post(f"{srv.url}/v1/chat/completions", json=body, timeout=120)
    r.raise_for_status()
    data = r.json()
    routed = decode(data["choices"][0]["routed_experts"])
    assert routed.shape[1:] == (2, 2)
    assert len(routed) == data["usage"]["prompt_tokens"] + data["usage"]["completion_tokens"] - 1
    # vLLM's streamed completion chunks carry none (ours share the choice type: null)
    with httpx.stream(
        "POST", f"{srv.url}/v1/completions", timeout=120,
        json={"model": path, "prompt": "hi", "max_tokens": 2, "stream": True},
    ) as s:  # fmt: skip
        text = "".join(s.iter_text())
    assert '"routed_experts":"' not in text
