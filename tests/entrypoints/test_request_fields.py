"""Every request field is honoured or refused (over the fake engine, which records what it
was asked): the table of known-but-unsupported fields, unknown fields, vLLM's checks
(context length, message rules, priority) and the plumbing of each vLLM extra into
``SamplingParams``. The real engine's side is in test_serve_request_fields.py."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import msgspec
import pytest

from actorllm.core.repetition import RepetitionDetectionParams
from actorllm.core.sampling_params import SamplingParams
from actorllm.entrypoints.openai.fields import UNSUPPORTED
from actorllm.entrypoints.openai.preprocess import messages_for_template, render_chat
from actorllm.entrypoints.openai.protocol import (
    AssistantMessage,
    ChatMessage,
    FunctionCall,
    ToolCall,
)
from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import FakeEngine
from tests.entrypoints.server_thread import ServerThread

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def fake() -> FakeEngine:
    return FakeEngine(max_model_len=64)


@pytest.fixture(scope="module")
def http(fake: FakeEngine) -> Iterator[httpx.Client]:
    srv = start_server(fake)
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        yield c
    srv.stop()


def post(http: httpx.Client, path: str, body: dict[str, Any], status: int = 200) -> Any:
    r = http.post(path, json=body)
    assert r.status_code == status, r.text
    return r.json()


def asked(fake: FakeEngine) -> tuple[Any, SamplingParams, int]:
    assert fake.last_request is not None
    return fake.last_request


# A value that asks for what the server cannot do yet, for every field of the table.
ASKING: dict[str, Any] = {
    "functions": [{"name": "f"}],
    "function_call": "auto",
    "best_of": 3,
    "logits_processors": ["x"],
    "suffix": "end",
    "prompt_embeds": "AAAA",
    "mm_processor_kwargs": {"a": 1},
    "media_io_kwargs": {"video": {"num_frames": 4}},
    "audio": {"voice": "alloy"},
    "modalities": ["text", "audio"],
    "prediction": {"type": "content", "content": "x"},
    "web_search_options": {},
    "kv_transfer_params": {"do_remote_decode": True},
    "ec_transfer_params": {"x": 1},
    "store": True,
    "metadata": {"k": "v"},
    "service_tier": "flex",
    "verbosity": "low",
}


def test_the_table_is_covered() -> None:
    assert set(ASKING) == set(UNSUPPORTED)


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_known_unsupported_fields_are_refused_by_name(http: httpx.Client, name: str) -> None:
    for path, body in (("/v1/chat/completions", {"messages": USER}), ("/v1/completions", {})):
        body = {"prompt": "x", **body, name: ASKING[name], "max_tokens": 1}
        err = post(http, path, body, 400)["error"]
        assert err["param"] == name and name in err["message"], err


@pytest.mark.parametrize(
    "extra",
    [
        {"tool_choice": "none"},
        {"response_format": {"type": "text"}},
        {"best_of": 2, "n": 2},
        {"length_penalty": 1.0},
        {"service_tier": "auto"},
        {"modalities": ["text"]},
        {"thinking_token_budget": -1},
        {"watermarking": False},
        {"watermarking": True},  # no --watermark-config: unwatermarked (vLLM warns)
        {"routed_experts_prompt_start": 0},
        {"prompt_embeds": []},
    ],
)
def test_their_off_values_are_accepted(http: httpx.Client, extra: dict[str, Any]) -> None:
    post(http, "/v1/chat/completions", {"messages": USER, "max_tokens": 1, **extra})


def test_unknown_fields_are_ignored_with_one_warning(
    http: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="actorllm.server"):
        post(http, "/v1/completions", {"prompt": "x", "max_tokens": 1, "zz_top": 1, "aa": 2})
    warnings = [r.getMessage() for r in caplog.records if "unknown request fields" in r.message]
    assert warnings == ["ignoring unknown request fields: aa, zz_top"]


def test_integral_floats_are_integers(http: httpx.Client, fake: FakeEngine) -> None:
    post(http, "/v1/completions", {"prompt": "x", "max_tokens": 3.0, "min_tokens": 1.0})
    params = asked(fake)[1]
    assert (params.max_tokens, params.min_tokens) == (3, 1)
    err = post(http, "/v1/completions", {"prompt": "x", "min_tokens": 1.5}, 400)["error"]
    assert err["param"] == "min_tokens"


def test_empty_prompt_is_refused_by_the_schema_rule(http: httpx.Client) -> None:
    assert post(http, "/v1/completions", {"prompt": ""}, 400)["error"]["param"] == "prompt"


# -- vLLM's checks --------------------------------------------------------------------------


def test_context_length_message(http: httpx.Client) -> None:
    err = post(http, "/v1/completions", {"prompt": "x", "max_tokens": 64}, 400)["error"]
    assert err["message"] == (
        "This model's maximum context length is 64 tokens. However, you requested 65 tokens "
        "(1 in the messages, 64 in the completion). Please reduce the length of the messages "
        "or completion."
    )
    assert err["param"] == "max_tokens"
    err = post(http, "/v1/completions", {"prompt": "word " * 80}, 400)["error"]
    assert "maximum context length is 64 tokens" in err["message"] and err["param"] == "prompt"


def test_omitted_max_tokens_is_the_room_left(http: httpx.Client, fake: FakeEngine) -> None:
    out = post(http, "/v1/chat/completions", {"messages": USER})
    assert asked(fake)[1].max_tokens == 64 - out["usage"]["prompt_tokens"]
    post(http, "/v1/completions", {"prompt": "x", "max_tokens": None})
    assert asked(fake)[1].max_tokens == 63


@pytest.mark.parametrize(
    ("message", "missing"),
    [
        ({"role": "user"}, "content"),
        ({"role": "system"}, "content"),
        ({"role": "developer"}, "content"),
        ({"role": "tool", "content": "42"}, "tool_call_id"),
    ],
)
def test_message_rules(http: httpx.Client, message: dict[str, Any], missing: str) -> None:
    err = post(http, "/v1/chat/completions", {"messages": [message]}, 400)["error"]
    assert err["param"] == "messages" and missing in err["message"]


def test_assistant_tool_calls_and_tool_results_are_accepted(http: httpx.Client) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        *USER,
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "content": "42", "tool_call_id": "c1"},
    ]
    post(http, "/v1/chat/completions", {"messages": messages, "max_tokens": 1})


def test_tool_calls_reach_the_chat_template() -> None:
    class Recorder:
        chat_template = "recorded"
        seen: list[dict[str, Any]] = []

        def apply_chat_template(self, messages: list[dict[str, Any]], **kw: Any) -> str:
            self.seen = messages
            return "rendered"

    call = ToolCall(id="c1", function=FunctionCall(name="f", arguments='{"x": 1}'))
    tok = Recorder()
    render_chat(
        tok,
        [AssistantMessage(tool_calls=[call])],
        add_generation_prompt=False,
        continue_final_message=False,
        documents=None,
        chat_template_kwargs=None,
    )
    assert tok.seen == messages_for_template([AssistantMessage(tool_calls=[call])])
    assert tok.seen[0]["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}
    ]


def test_priority_needs_the_priority_policy(http: httpx.Client) -> None:
    err = post(http, "/v1/completions", {"prompt": "x", "priority": 1}, 400)["error"]
    assert err["param"] == "priority"
    engine = FakeEngine(scheduling_policy="priority")
    srv: ServerThread = start_server(engine)
    try:
        r = httpx.post(srv.url + "/v1/completions", json={"prompt": "x", "priority": -5})
        assert r.status_code == 200 and asked(engine)[2] == -5
    finally:
        srv.stop()


def test_continue_final_message_excludes_a_generation_prompt(http: httpx.Client) -> None:
    body = {"messages": USER, "continue_final_message": True}
    err = post(http, "/v1/chat/completions", body, 400)["error"]
    assert err["param"] == "continue_final_message"


# -- plumbing: each field reaches SamplingParams / the prompt ---------------------------------


@pytest.mark.parametrize(
    ("field", "value", "attr"),
    [
        ("repetition_penalty", 1.3, "repetition_penalty"),
        ("min_tokens", 2, "min_tokens"),
        ("skip_special_tokens", False, "skip_special_tokens"),
        ("spaces_between_special_tokens", False, "spaces_between_special_tokens"),
        ("include_stop_str_in_output", True, "include_stop_str_in_output"),
        ("allowed_token_ids", [5, 6], "allowed_token_ids"),
        ("bad_words", ["fox"], "bad_words"),
        ("prompt_logprobs", 2, "prompt_logprobs"),
        ("truncate_prompt_tokens", 4, "truncate_prompt_tokens"),
        ("top_k", 5, "top_k"),
        ("min_p", 0.1, "min_p"),
        ("stop_token_ids", [7], "stop_token_ids"),
        ("ignore_eos", True, "ignore_eos"),
        ("stream_interval", 3, "stream_interval"),
    ],
)
def test_fields_reach_sampling_params(
    http: httpx.Client, fake: FakeEngine, field: str, value: Any, attr: str
) -> None:
    for path, body in (("/v1/completions", {"prompt": "x y"}), ("/v1/chat/completions", {})):
        body = {"messages": USER, **body, "max_tokens": 3, field: value}
        post(http, path, body)
        assert getattr(asked(fake)[1], attr) == value


def test_logprob_token_ids_reach_sampling_params_and_the_response(
    http: httpx.Client, fake: FakeEngine
) -> None:
    ids = [5, 6]
    body = {"prompt": "x y", "max_tokens": 2, "logprobs": 0, "logprob_token_ids": ids}
    choice = post(http, "/v1/completions", body)["choices"][0]
    params = asked(fake)[1]
    assert (params.logprob_token_ids, params.logprobs, params.num_logprobs) == (ids, None, 2)
    assert params.skip_clone  # built for this request alone, as vLLM's server does
    assert [len(top) for top in choice["logprobs"]["top_logprobs"]] == [3, 3]  # sampled + ids
    body = {"messages": USER, "max_tokens": 2, "logprobs": True, "logprob_token_ids": ids}
    content = post(http, "/v1/chat/completions", body)["choices"][0]["logprobs"]["content"]
    assert [len(c["top_logprobs"]) for c in content] == [3, 3]
    assert asked(fake)[1].logprob_token_ids == ids


def test_repetition_detection_reaches_sampling_params(http: httpx.Client, fake: FakeEngine) -> None:
    rd = {"max_pattern_size": 4, "min_pattern_size": 2, "min_count": 3}
    for path, extra in (("/v1/completions", {"prompt": "x"}), ("/v1/chat/completions", {})):
        post(http, path, {"messages": USER, **extra, "max_tokens": 2, "repetition_detection": rd})
        assert asked(fake)[1].repetition_detection == RepetitionDetectionParams(**rd)
        bad = {**rd, "min_count": 1}
        body = {"messages": USER, **extra, "repetition_detection": bad}
        err = post(http, path, body, 400)["error"]
        assert "min_count must be >= 2" in err["message"], err
        assert (err["param"] or "").startswith("repetition_detection"), err


def test_logprob_token_ids_need_logprobs_and_fit_vllms_bound(http: httpx.Client) -> None:
    for path, extra in (("/v1/completions", {"prompt": "x"}), ("/v1/chat/completions", {})):
        body: dict[str, Any] = {"messages": USER, **extra, "logprob_token_ids": [5]}
        err = post(http, path, body, 400)["error"]
        assert err["param"] == "logprob_token_ids" and "logprobs" in err["message"], err
        body["logprobs"] = 0 if "prompt" in extra else True
        body["logprob_token_ids"] = list(range(129))
        err = post(http, path, body, 400)["error"]
        assert err["param"] == "logprob_token_ids" and "128" in err["message"], err


@pytest.mark.parametrize("bad", [0, -1, 1.5, "3"])
def test_an_invalid_stream_interval_is_refused_naming_it(http: httpx.Client, bad: Any) -> None:
    for path, extra in (("/v1/completions", {"prompt": "x"}), ("/v1/chat/completions", {})):
        body: dict[str, Any] = {"messages": USER, **extra, "stream": True, "stream_interval": bad}
        err = post(http, path, body, 400)["error"]
        assert err["param"] == "stream_interval", err


def test_a_request_chat_template_needs_the_server_to_trust_it(http: httpx.Client) -> None:
    body = {"messages": USER, "chat_template": "{{ messages[0]['content'] }}"}
    for path in ("/v1/chat/completions", "/tokenize"):
        error = post(http, path, body, status=400)["error"]
        assert error["param"] == "chat_template"
        assert "--trust-request-chat-template" in error["message"]


def test_tokenize_renders_tools_and_returns_token_strings(http: httpx.Client) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    # The demo template cannot show tools: refused by name (not silently left out).
    refused = post(http, "/tokenize", {"messages": USER, "tools": tools}, status=400)
    assert refused["error"]["param"] == "tools"
    strs = post(http, "/tokenize", {"prompt": "hello world", "return_token_strs": True})
    assert len(strs["token_strs"]) == strs["count"] and "token_strs" in strs
    assert post(http, "/tokenize", {"prompt": "hello"})["token_strs"] is None


def test_cache_salt_reaches_the_engine_prompt(http: httpx.Client, fake: FakeEngine) -> None:
    for path, body in (("/v1/completions", {"prompt": "x y"}), ("/v1/chat/completions", {})):
        post(http, path, {"messages": USER, **body, "max_tokens": 1, "cache_salt": "tenant-a"})
        prompt = asked(fake)[0]
        assert isinstance(prompt, dict) and prompt["cache_salt"] == "tenant-a"
    error = post(http, "/v1/completions", {"prompt": "x", "cache_salt": ""}, status=400)
    assert error["error"]["param"] == "cache_salt"


def test_add_special_tokens_and_truncation_shape_the_prompt(
    http: httpx.Client, fake: FakeEngine
) -> None:
    post(http, "/v1/completions", {"prompt": "a b c d e f", "truncate_prompt_tokens": 2})
    prompt = asked(fake)[0]
    assert len(prompt["prompt_token_ids"]) == 2 and "prompt" not in prompt  # text no longer fits
    ids = fake.tokenizer.encode("<|im_start|>x", add_special_tokens=False)
    post(http, "/v1/completions", {"prompt": "<|im_start|>x", "add_special_tokens": False})
    assert asked(fake)[0]["prompt_token_ids"] == ids
    post(http, "/v1/chat/completions", {"messages": USER, "add_generation_prompt": False})
    text = asked(fake)[0]["prompt"]
    assert text == "<|im_start|>user\nhi<|im_end|>\n"


def test_return_tokens_as_token_ids_and_stream_usage(http: httpx.Client) -> None:
    body = {"prompt": "x", "max_tokens": 2, "logprobs": 1, "return_tokens_as_token_ids": True}
    tokens = post(http, "/v1/completions", body)["choices"][0]["logprobs"]["tokens"]
    assert all(t.startswith("token_id:") for t in tokens)
    options = {"include_usage": True, "continuous_usage_stats": True}
    with http.stream(
        "POST",
        "/v1/completions",
        json={"prompt": "x", "max_tokens": 2, "stream": True, "stream_options": options},
    ) as r:
        chunks = [line for line in r.iter_lines() if line.startswith("data: {")]
    assert chunks and all('"usage":{' in c for c in chunks)


def test_return_token_ids(http: httpx.Client, fake: FakeEngine) -> None:
    body = {"prompt": "a b", "max_tokens": 3, "n": 2, "return_token_ids": True}
    out = post(http, "/v1/completions", body)
    prompt_ids = fake.tokenizer.encode("a b")
    for choice in out["choices"]:
        assert choice["prompt_token_ids"] == prompt_ids
        assert fake.tokenizer.decode(choice["token_ids"]) == choice["text"]
    chat = post(http, "/v1/chat/completions", {"messages": USER, **body})
    assert len(chat["prompt_token_ids"]) == chat["usage"]["prompt_tokens"]
    assert [len(c["token_ids"]) for c in chat["choices"]] == [3, 3]
    with http.stream("POST", "/v1/chat/completions", json={**body, "messages": USER,
                                                             "stream": True}) as r:  # fmt: skip
        events = [json.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: {")]
    assert events[0]["prompt_token_ids"] == chat["prompt_token_ids"]
    streamed = [t for e in events for c in e["choices"] for t in c.get("token_ids") or []]
    assert len(streamed) == 6
    plain = post(http, "/v1/completions", {"prompt": "a", "max_tokens": 1})["choices"][0]
    assert plain["token_ids"] is None and plain["prompt_token_ids"] is None


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_an_earlier_turns_reasoning_reaches_the_chat_template(field: str) -> None:
    """Both of vLLM's names for an assistant turn's reasoning arrive as reasoning_content,
    the name Qwen3's and DeepSeek-R1's templates read (not dropped as an unknown field)."""
    msg = msgspec.convert({"role": "assistant", "content": "4", field: "2 + 2"}, ChatMessage)
    (entry,) = messages_for_template([msg])
    assert entry == {"role": "assistant", "content": "4", "reasoning_content": "2 + 2"}


@pytest.mark.parametrize("value", [None, True, False])
@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
def test_watermarking_reaches_the_sampling_params(
    http: httpx.Client, fake: FakeEngine, route: str, value: bool | None
) -> None:
    """vLLM's: the request's switch is passed on as given; the engine resolves it."""
    body: dict[str, Any] = {"max_tokens": 1, "watermarking": value}
    body.update({"messages": USER} if "chat" in route else {"prompt": "x"})
    post(http, route, body)
    assert asked(fake)[1].watermarking is value


@pytest.mark.parametrize(
    ("path", "body", "field", "want"),
    [
        ("/v1/completions", {"prompt": "x", "logprobs": False}, "logprobs", 0),
        ("/v1/completions", {"prompt": "x", "logprobs": True}, "logprobs", 1),
        ("/v1/completions", {"prompt": "x", "prompt_logprobs": True}, "prompt_logprobs", 1),
        ("/v1/chat/completions", {"messages": USER, "prompt_logprobs": False},
         "prompt_logprobs", 0),
    ],
)  # fmt: skip
def test_a_boolean_count_of_logprobs_is_0_or_1_as_vllm_reads_it(
    http: httpx.Client, fake: FakeEngine, path: str, body: dict[str, Any], field: str, want: int
) -> None:
    """vLLM's pydantic models read ``true`` / ``false`` in these integer fields as 1 / 0
    (its own tests send ``"prompt_logprobs": true`` and ``"logprobs": false``)."""
    post(http, path, {**body, "max_tokens": 1})
    _, params, _ = asked(fake)
    assert getattr(params, field) == want and type(getattr(params, field)) is int


def test_routed_experts_prompt_start_reaches_the_params(
    http: httpx.Client, fake: FakeEngine
) -> None:
    """vLLM's field (--enable-return-routed-experts); a negative start is a 400."""
    post(http, "/v1/completions", {"prompt": "x", "max_tokens": 1,
                                   "routed_experts_prompt_start": 2})  # fmt: skip
    assert asked(fake)[1].routed_experts_prompt_start == 2
    body = {"messages": USER, "max_tokens": 1, "routed_experts_prompt_start": -1}
    err = post(http, "/v1/chat/completions", body, status=400)["error"]
    assert err["param"] == "routed_experts_prompt_start"
