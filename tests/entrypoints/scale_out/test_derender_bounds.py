"""What a derender body may carry (trio and asyncio servers, fake engine: max_model_len
64, max_logprobs 20): vLLM's 400s with its messages, before anything is decoded, on the
whole and the streamed routes, and its 404 for a model not served."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from actorllm.entrypoints.scale_out.derender_bounds import MAX_N_SEQUENCES
from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import FakeEngine
from tests.entrypoints.server_thread import ServerThread

CHAT = "/v1/chat/completions/derender"
COMPLETION = "/v1/completions/derender"


def post(server: ServerThread, path: str, body: Any) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=30)


def gen(choices: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    if choices is None:
        choices = [{"index": 0, "token_ids": [5, 6], "finish_reason": "stop"}]
    return {"request_id": "gen-1", "choices": choices, **extra}


def entry(top: int) -> dict[str, Any]:
    tops = [{"token_id": i, "logprob": -1.0, "rank": i + 1} for i in range(top)]
    return {"token_id": 5, "logprob": -1.0, "rank": 1, "top_logprobs": tops}


def logprobs_choice(positions: int, top: int) -> dict[str, Any]:
    content = [entry(top) for _ in range(positions)]
    return {"index": 0, "token_ids": [5], "finish_reason": "stop", "logprobs": {"content": content}}


def refused(r: httpx.Response, status: int, message: str) -> None:
    assert r.status_code == status, r.text
    assert message in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"generate_response": gen([{"index": 0, "token_ids": [], "finish_reason": "stop"}])},
         "choice 0 has empty or null token_ids"),
        ({"generate_response": gen([{"index": 0, "token_ids": None}])},
         "choice 0 has empty or null token_ids"),
        ({"generate_response": gen(), "prompt_token_ids": [1] * 65},
         "prompt_token_ids length (65) exceeds max_model_len (64)."),
        ({"generate_response": gen([logprobs_choice(65, 0)])},
         "logprobs.content length (65) in choice 0 exceeds max_model_len (64)."),
        ({"generate_response": gen([logprobs_choice(1, 21)])},
         "top_logprobs count (21) in choice 0 exceeds max_logprobs (20)."),
        ({"generate_response": gen(prompt_logprobs=[None] * 65)},
         "prompt_logprobs length (65) in response 'gen-1' exceeds max_model_len (64)."),
        ({"generate_response": gen([{"index": i, "token_ids": [5]}
                                    for i in range(MAX_N_SEQUENCES + 1)])},
         f"choices count ({MAX_N_SEQUENCES + 1}) in response 'gen-1' exceeds server maximum"),
    ],
)  # fmt: skip
def test_chat_refusals(server: ServerThread, body: dict[str, Any], message: str) -> None:
    refused(post(server, CHAT, body), 400, message)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"generate_responses": [gen([{"index": 0, "token_ids": []}])]},
         "choice 0 in response gen-1 has empty or null token_ids"),
        ({"generate_responses": [gen()], "prompt_token_ids": [[1] * 65]},
         "prompt_token_ids length (65) exceeds max_model_len (64)."),
        ({"generate_responses": [gen()] * (MAX_N_SEQUENCES + 1)},
         f"generate_responses count ({MAX_N_SEQUENCES + 1}) exceeds server maximum"),
    ],
)  # fmt: skip
def test_completion_refusals(server: ServerThread, body: dict[str, Any], message: str) -> None:
    refused(post(server, COMPLETION, body), 400, message)


def test_the_top_logprobs_bound_itself_is_taken(server: ServerThread) -> None:
    r = post(server, CHAT, {"generate_response": gen([logprobs_choice(64, 20)])})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("path", [CHAT, COMPLETION])
@pytest.mark.parametrize("stream", [False, True])
def test_a_model_not_served_is_a_404(server: ServerThread, path: str, stream: bool) -> None:
    body: dict[str, Any] = {"model": "does-not-exist"}
    if stream:
        body |= {"stream": True, "generate_chunk": gen()}
    elif path == CHAT:
        body |= {"generate_response": gen()}
    else:
        body |= {"generate_responses": [gen()]}
    r = post(server, path, body)
    refused(r, 404, "does-not-exist")
    assert r.json()["error"]["param"] == "model"


def test_stream_refusals(server: ServerThread) -> None:
    two = gen([{"index": 0, "token_ids": [5]}, {"index": 1, "token_ids": [6]}])
    refused(post(server, CHAT, {"stream": True, "generate_chunk": two}), 400,
            "derender_chat_stream expects at most one choice per chunk (got 2).")  # fmt: skip
    refused(post(server, COMPLETION, {"stream": True, "generate_chunk": two}), 400,
            "derender_completion_stream expects at most one choice per chunk (got 2).")  # fmt: skip
    state = {"output_token_ids": [5] * 60, "output_chunk_lens": [60]}
    body = {"stream": True, "generate_chunk": gen(), "stream_state": state,
            "prompt_token_ids": [1] * 3}  # fmt: skip
    refused(post(server, CHAT, body), 400,
            "prompt_token_ids length (3) plus output_token_ids length (60) plus delta (2) "
            "exceeds max_model_len (64).")  # fmt: skip
    body = {"stream": True, "generate_chunk": gen(), "prompt_token_ids": [1] * 65}
    refused(post(server, COMPLETION, body), 400,
            "prompt_token_ids length (65) exceeds max_model_len (64).")  # fmt: skip


@pytest.mark.parametrize("worker_class", ["trio", "asyncio"])
def test_derender_bodies_get_the_wider_limit(engine: FakeEngine, worker_class: str) -> None:
    """A derender body is another server's whole answer: over --max-body-bytes it is still
    read (up to DERENDER_BODY_FACTOR times it, under the root path too) and refused by
    its counts, as vLLM does; other routes keep the limit."""
    srv = start_server(engine, worker_class=worker_class, enable_scale_out=True,
                       max_body_bytes=4096, root_path="/llm")  # fmt: skip
    try:
        big = {"generate_response": gen([logprobs_choice(100, 0)])}  # ~6 KB
        for path in (CHAT, "/llm" + CHAT):
            refused(post(srv, path, big), 400, "logprobs.content length (100)")
        huge = {"generate_response": gen([logprobs_choice(2000, 0)])}  # ~110 KB
        refused(post(srv, CHAT, huge), 413, "exceeds the limit of 65536 bytes")
        chat = {"messages": [{"role": "user", "content": "x" * 8000}]}
        refused(post(srv, "/v1/chat/completions", chat), 413, "limit of 4096 bytes")
    finally:
        srv.stop()
    assert srv.error is None
