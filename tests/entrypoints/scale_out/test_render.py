"""``/v1/chat/completions/render`` and ``/v1/completions/render`` over HTTP (trio and
asyncio servers, fake engine): the rendered request is vLLM 0.32's, field for field, with
its sampling params serialised as vLLM serialises them (the expected values below are
vLLM's own answers to the same bodies); refusals carry vLLM's statuses."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from actorllm.engine.scheduling.structured_outputs import reasoning_gate_for
from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import FakeEngine
from tests.entrypoints.server_thread import ServerThread

HI = [{"role": "user", "content": "hi"}]
# vLLM's keys of a rendered request, in its order.
KEYS = ["request_id", "token_ids", "token_offsets", "features", "content_parts",
        "sampling_params", "model", "reasoning_ended", "reasoning_parser_kwargs",
        "return_token_ids", "output_mode", "stream", "stream_options", "cache_salt",
        "priority", "kv_transfer_params", "ec_transfer_params"]  # fmt: skip
_BASE = {"presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0,
         "temperature": 1.0, "top_p": 1.0, "min_p": 0.0, "stop": [],
         "stop_token_ids": []}  # fmt: skip
# (route, body, vLLM 0.32's sampling_params for it)
CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("chat", {"messages": HI, "max_tokens": 5, "stream": True},
     {**_BASE, "max_tokens": 5, "output_kind": 1, "skip_clone": True, "bad_words": [],
      "skip_reading_prefix_cache": False}),
    ("chat", {"messages": HI, "max_tokens": 5, "temperature": 0, "stop": ["x", "yy"],
              "logprobs": True, "top_logprobs": 2, "seed": 3},
     {"presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0,
      "temperature": 0.0, "seed": 3, "stop": ["x", "yy"], "stop_token_ids": [],
      "max_tokens": 5, "logprobs": 2, "output_kind": 2, "skip_clone": True,
      "output_text_buffer_length": 1, "bad_words": [], "skip_reading_prefix_cache": False}),
    ("chat", {"messages": HI, "max_tokens": 7, "n": 2, "top_k": 5, "top_p": 0.5,
              "prompt_logprobs": 1, "logit_bias": {"5": 1.0}, "bad_words": ["q"],
              "min_tokens": 1, "ignore_eos": True, "stop_token_ids": [3, 3, 4],
              "presence_penalty": 0.5, "repetition_penalty": 1.1,
              "include_stop_str_in_output": True, "stop": "zz"},
     {"n": 2, "presence_penalty": 0.5, "frequency_penalty": 0.0, "repetition_penalty": 1.1,
      "temperature": 1.0, "top_p": 0.5, "top_k": 5, "min_p": 0.0, "stop": ["zz"],
      "stop_token_ids": [3, 4], "ignore_eos": True, "max_tokens": 7, "min_tokens": 1,
      "prompt_logprobs": 1, "include_stop_str_in_output": True, "output_kind": 2,
      "skip_clone": True, "logit_bias": {"5": 1.0}, "bad_words": ["q"],
      "skip_reading_prefix_cache": True}),
    ("chat", {"messages": HI, "max_tokens": 6, "response_format": {"type": "json_object"},
              "skip_special_tokens": False, "logprobs": True},
     {**_BASE, "max_tokens": 6, "logprobs": 0, "skip_special_tokens": False,
      "output_kind": 2, "skip_clone": True,
      "structured_outputs": {"json": None, "regex": None, "choice": None, "grammar": None,
                             "json_object": True, "disable_any_whitespace": False,
                             "disable_additional_properties": False,
                             "whitespace_pattern": None, "structural_tag": None,
                             "_backend": None, "_backend_was_auto": False},
      "bad_words": [], "skip_reading_prefix_cache": False}),
    ("completions", {"prompt": "hi", "echo": True, "logprobs": 2, "max_tokens": 4},
     {**_BASE, "max_tokens": 4, "logprobs": 2, "prompt_logprobs": 2, "output_kind": 2,
      "skip_clone": True, "bad_words": [], "skip_reading_prefix_cache": True}),
    ("completions", {"prompt": "hi", "max_tokens": 4, "temperature": 0.7, "min_p": 0.1,
                     "seed": -1, "stream": True, "stream_options": {"include_usage": True}},
     {**_BASE, "temperature": 0.7, "min_p": 0.1, "max_tokens": 4, "output_kind": 1,
      "skip_clone": True, "bad_words": [], "skip_reading_prefix_cache": False}),
]  # fmt: skip


def render(server: ServerThread, route: str, body: dict[str, Any], **kw: Any) -> httpx.Response:
    path = "/v1/chat/completions/render" if route == "chat" else "/v1/completions/render"
    return httpx.post(server.url + path, json=body, timeout=30, **kw)


@pytest.mark.parametrize(("route", "body", "expected"), CASES)
def test_sampling_params_are_vllms(
    server: ServerThread, route: str, body: dict[str, Any], expected: dict[str, Any]
) -> None:
    r = render(server, route, body)
    assert r.status_code == 200, r.text
    got = r.json() if route == "chat" else r.json()[0]
    assert list(got) == KEYS
    assert got["sampling_params"] == expected
    assert list(got["sampling_params"]) == list(expected)  # vLLM's field order


def test_chat_render_is_the_prompt_chat_completions_runs(
    server: ServerThread, engine: FakeEngine
) -> None:
    body = {"messages": HI, "max_tokens": 3, "cache_salt": "salt", "request_id": "abc"}
    got = render(server, "chat", {**body, "model": "fake-model"}).json()
    assert got["request_id"] == "chatcmpl-abc"
    assert got["model"] == "fake-model" and got["cache_salt"] == "salt"
    assert got["stream"] is False and got["stream_options"] is None
    assert got["output_mode"] == "tokens" and got["features"] is None
    r = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200
    assert engine.last_request is not None
    prompt = engine.last_request[0]
    assert isinstance(prompt, dict) and prompt["prompt_token_ids"] == got["token_ids"]


def test_header_request_id_and_stream_options(server: ServerThread) -> None:
    body = {"messages": HI, "stream": True, "stream_options": {"include_usage": True}}
    got = render(server, "chat", body, headers={"X-Request-Id": "hdr"}).json()
    assert got["request_id"] == "chatcmpl-hdr"
    assert got["stream_options"] == {"include_usage": True, "continuous_usage_stats": False}
    # max_tokens left out: the room the prompt leaves (fake engine: 64 tokens)
    assert got["sampling_params"]["max_tokens"] == 64 - len(got["token_ids"])


def test_completion_render_one_request_per_prompt(server: ServerThread) -> None:
    r = render(server, "completions", {"prompt": [[8, 9], [5, 6, 7]], "max_tokens": 2,
                                        "request_id": "r"})  # fmt: skip
    assert r.status_code == 200, r.text
    got = r.json()
    assert [g["request_id"] for g in got] == ["cmpl-r-0", "cmpl-r-1"]
    assert got[1]["token_ids"] == [5, 6, 7]
    one = render(server, "completions", {"prompt": "a", "request_id": "r"}).json()
    assert [g["request_id"] for g in one] == ["cmpl-r"]


@pytest.mark.parametrize(
    ("route", "body", "status", "param"),
    [
        ("chat", {"messages": HI, "use_beam_search": True, "n": 2}, 400, "use_beam_search"),
        ("completions", {"prompt": "a", "use_beam_search": True, "n": 2}, 400,
         "use_beam_search"),
        ("chat", {"messages": HI, "model": "nope"}, 404, None),
        ("chat", {"messages": [], "max_tokens": 2}, 400, None),
        ("completions", {"prompt": "a", "max_tokens": 100}, 400, "max_tokens"),
    ],
)  # fmt: skip
def test_refusals(
    server: ServerThread, route: str, body: dict[str, Any], status: int, param: str | None
) -> None:
    r = render(server, route, body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == status
    if param is not None:
        assert error["param"] == param
    if body.get("use_beam_search"):
        assert error["message"] == "Beam search is not supported by the render endpoint"


def test_without_the_flag_vllms_403(engine: FakeEngine) -> None:
    srv = start_server(engine)
    try:
        r = httpx.post(srv.url + "/v1/chat/completions/render", json={"messages": HI})
        assert r.status_code == 403
        assert r.json()["error"]["type"] == "PermissionDeniedError"
    finally:
        srv.stop()


def test_reasoning_ended_is_what_the_engine_reads_in_the_prompt() -> None:
    """Without a reasoning parser null (the engine decides nothing); with one, whether the
    rendered prompt already closed the reasoning (vLLM's resolved value)."""
    engine = FakeEngine(reasoning_parser="deepseek_r1")
    gate = reasoning_gate_for(engine.config, engine.tokenizer)
    assert gate is not None
    srv = start_server(engine, enable_scale_out=True)
    try:
        for messages in (HI, [*HI, {"role": "assistant", "content": "<think>"}]):
            body = {"messages": messages, "max_tokens": 2, "add_generation_prompt": False,
                    "continue_final_message": len(messages) > 1}  # fmt: skip
            got = render(srv, "chat", body).json()
            closed = gate.prompt_state(got["token_ids"], gate.thinking) == "closed"
            assert got["reasoning_ended"] is closed
    finally:
        srv.stop()


def test_reasoning_ended_follows_the_requests_thinking() -> None:
    """qwen3 (vLLM 0.32): thinking on by default, so the answer waits for the reasoning;
    the request's enable_thinking false ends it before the first token."""
    srv = start_server(FakeEngine(reasoning_parser="qwen3"), enable_scale_out=True)
    try:
        body: dict[str, Any] = {"messages": HI, "max_tokens": 2}
        assert render(srv, "chat", body).json()["reasoning_ended"] is False
        off = {**body, "chat_template_kwargs": {"enable_thinking": False}}
        assert render(srv, "chat", off).json()["reasoning_ended"] is True
    finally:
        srv.stop()


def test_no_reasoning_parser_leaves_reasoning_ended_null(server: ServerThread) -> None:
    assert (
        render(server, "chat", {"messages": HI, "max_tokens": 2}).json()["reasoning_ended"] is None
    )


def test_token_offsets_when_asked(server: ServerThread) -> None:
    """vLLM's ``return_token_offsets``: one span per id, in the completion's prompt (each
    of a batch's own) or the chat's templated prompt; null unless asked."""
    prompts = ["Hello, world.", "Goodbye, world."]
    got = render(server, "completions", {"prompt": prompts, "return_token_offsets": True})
    for item, prompt in zip(got.json(), prompts, strict=True):
        assert len(item["token_offsets"]) == len(item["token_ids"])
        assert all(0 <= s <= e <= len(prompt) for s, e in item["token_offsets"])
        assert item["token_offsets"][-1][1] == len(prompt)
    chat = render(server, "chat", {"messages": HI, "return_token_offsets": True}).json()
    assert len(chat["token_offsets"]) == len(chat["token_ids"])
    assert render(server, "chat", {"messages": HI}).json()["token_offsets"] is None
    ids = render(server, "completions", {"prompt": [5, 6], "return_token_offsets": True})
    assert ids.json()[0]["token_offsets"] is None  # token ids have no text


@pytest.mark.parametrize("side", ["left", "right"])
def test_token_offsets_follow_truncation(server: ServerThread, side: str) -> None:
    prompt = "The quick brown fox jumps over the lazy dog."
    body = {"prompt": prompt, "return_token_offsets": True, "truncate_prompt_tokens": 4,
            "truncation_side": side}  # fmt: skip
    (got,) = render(server, "completions", body).json()
    assert len(got["token_ids"]) == len(got["token_offsets"]) == 4
    if side == "left":  # the last tokens are kept
        assert got["token_offsets"][-1][1] == len(prompt) and got["token_offsets"][0][0] > 0
    else:
        assert got["token_offsets"][0][0] == 0 and got["token_offsets"][-1][1] < len(prompt)
