"""vLLM 0.32's request fields over HTTP (the fake engine records what it was asked): every
field vLLM's ``ChatCompletionRequest`` / ``CompletionRequest`` defines is honoured or refused
by name, and vLLM's raw-body checks answer with vLLM's messages."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from actorllm.entrypoints.openai.fields import UNSUPPORTED
from actorllm.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest
from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import FakeEngine

USER = [{"role": "user", "content": "hi"}]
# Renders what reasoning_effort sets, so the prompt text shows it reached the template.
EFFORT_TEMPLATE = (
    "{{ reasoning_effort }}|{{ enable_thinking }}|"
    "{% for m in messages %}{{ m.content }}{% endfor %}"
)

# The request fields of vLLM 0.32 (vllm/entrypoints/openai/chat_completion/protocol.py and
# completion/protocol.py, read from the installed package's ``model_fields``).
VLLM_CHAT_FIELDS = """
add_generation_prompt add_special_tokens allowed_token_ids bad_words cache_salt
chat_template chat_template_kwargs continue_final_message documents ec_transfer_params
echo frequency_penalty ignore_eos include_reasoning include_stop_str_in_output
kv_transfer_params length_penalty logit_bias logprob_token_ids logprobs
max_completion_tokens max_tokens media_io_kwargs messages min_p min_tokens mm_payload
mm_processor_kwargs model n parallel_tool_calls presence_penalty priority
prompt_logprobs reasoning_effort repetition_detection repetition_penalty request_id
response_format return_mm_kwargs return_prompt_text return_token_ids
return_token_offsets return_tokens_as_token_ids routed_experts_prompt_start seed
session_id skip_special_tokens spaces_between_special_tokens stop stop_token_ids stream
stream_interval stream_options structured_outputs temperature thinking_token_budget
tool_choice tools top_k top_logprobs top_p truncate_prompt_tokens truncation_side
use_beam_search user vllm_xargs watermarking
""".split()  # noqa: SIM905
VLLM_COMPLETION_FIELDS = """
add_special_tokens allowed_token_ids bad_words cache_salt ec_transfer_params echo
frequency_penalty ignore_eos include_stop_str_in_output kv_transfer_params
length_penalty logit_bias logprob_token_ids logprobs max_tokens min_p min_tokens
mm_payload model n presence_penalty priority prompt prompt_embeds prompt_logprobs
repetition_detection repetition_penalty request_id response_format return_mm_kwargs
return_token_ids return_token_offsets return_tokens_as_token_ids
routed_experts_prompt_start seed session_id skip_special_tokens
spaces_between_special_tokens stop stop_token_ids stream stream_interval stream_options
structured_outputs suffix temperature thinking_token_budget top_k top_p
truncate_prompt_tokens truncation_side use_beam_search user vllm_xargs watermarking
""".split()  # noqa: SIM905


@pytest.fixture(scope="module")
def fake() -> FakeEngine:
    return FakeEngine(max_model_len=64)


# Both anyio backends: the handlers are backend-neutral, hypercorn runs either.
@pytest.fixture(scope="module", params=["trio", "asyncio"])
def http(fake: FakeEngine, request: pytest.FixtureRequest) -> Iterator[httpx.Client]:
    srv = start_server(fake, request.param, trust_request_chat_template=True)
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        yield c
    srv.stop()


def post(http: httpx.Client, path: str, body: dict[str, Any], status: int = 200) -> Any:
    r = http.post(path, json=body)
    assert r.status_code == status, r.text
    return r.json()


def chat(http: httpx.Client, status: int = 200, **fields: Any) -> Any:
    return post(http, "/v1/chat/completions", {"messages": USER, "max_tokens": 1, **fields}, status)


def engine_prompt(fake: FakeEngine) -> dict[str, Any]:
    assert fake.last_request is not None
    prompt = fake.last_request[0]
    assert isinstance(prompt, dict)
    return prompt


def test_every_vllm_field_is_known() -> None:
    """No field vLLM defines falls through to "unknown field, one warning"."""
    known_chat = set(ChatCompletionRequest.__struct_fields__) | set(UNSUPPORTED)
    known_completion = set(CompletionRequest.__struct_fields__) | set(UNSUPPORTED)
    assert [f for f in VLLM_CHAT_FIELDS if f not in known_chat] == []
    assert [f for f in VLLM_COMPLETION_FIELDS if f not in known_completion] == []


# -- reasoning_effort ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("effort", "kwargs", "rendered"),
    [
        ("high", None, "high|True|hi"),
        ("none", None, "none|False|hi"),
        ("low", {"enable_thinking": False}, "low|False|hi"),  # the request's own wins
        ("medium", {"reasoning_effort": "max"}, "medium|True|hi"),  # the field wins
    ],
)
def test_reasoning_effort_reaches_the_chat_template(
    http: httpx.Client, effort: str, kwargs: dict[str, Any] | None, rendered: str
) -> None:
    out = chat(
        http,
        reasoning_effort=effort,
        chat_template=EFFORT_TEMPLATE,
        chat_template_kwargs=kwargs,
        return_prompt_text=True,
    )
    assert out["prompt_text"] == rendered


def test_reasoning_effort_values_are_vllms(http: httpx.Client) -> None:
    for effort in ("minimal", "xhigh", "max"):
        chat(http, reasoning_effort=effort)
    err = chat(http, 400, reasoning_effort="huge")["error"]
    assert err["param"] == "reasoning_effort"


# -- truncation_side -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("side", "kept"), [(None, [8, 9, 10]), ("left", [8, 9, 10]), ("right", [1, 2, 3])]
)
def test_truncation_side_on_completions(
    http: httpx.Client, fake: FakeEngine, side: str | None, kept: list[int]
) -> None:
    body = {"prompt": list(range(1, 11)), "max_tokens": 1, "truncate_prompt_tokens": 3}
    post(http, "/v1/completions", {**body, "truncation_side": side})
    assert engine_prompt(fake)["prompt_token_ids"] == kept


def test_truncation_side_on_chat(http: httpx.Client, fake: FakeEngine) -> None:
    chat(http, chat_template=EFFORT_TEMPLATE)
    whole = engine_prompt(fake)["prompt_token_ids"]
    assert len(whole) > 2
    chat(http, chat_template=EFFORT_TEMPLATE, truncate_prompt_tokens=2, truncation_side="right")
    assert engine_prompt(fake)["prompt_token_ids"] == whole[:2]
    chat(http, chat_template=EFFORT_TEMPLATE, truncate_prompt_tokens=2, truncation_side="left")
    assert engine_prompt(fake)["prompt_token_ids"] == whole[-2:]


def test_kv_transfer_prompt_ids_are_the_prompt(http: httpx.Client, fake: FakeEngine) -> None:
    # vLLM's disaggregated decode stage: the prefill's ids, used verbatim (no template)
    ids = [5, 6, 7, 8]
    r = chat(http, kv_transfer_params={"prompt_token_ids": ids}, return_token_ids=True)
    assert engine_prompt(fake)["prompt_token_ids"] == ids and r["prompt_token_ids"] == ids
    chat(http, chat_template=EFFORT_TEMPLATE)
    rendered = engine_prompt(fake)["prompt_token_ids"]
    # echo needs the messages: they are rendered instead (vLLM's rule)
    echo = [*USER, {"role": "assistant", "content": "so"}]
    reuse = {"prompt_token_ids": ids}
    post(http, "/v1/chat/completions", {"messages": echo, "max_tokens": 1, "echo": True,
         "chat_template": EFFORT_TEMPLATE, "kv_transfer_params": reuse})  # fmt: skip
    assert engine_prompt(fake)["prompt_token_ids"] != ids and len(rendered) > 0
    for bad in ([], [1, True], [-1], "12", [10**9]):
        body = {"messages": USER, "max_tokens": 1, "kv_transfer_params": {"prompt_token_ids": bad}}
        err = post(http, "/v1/chat/completions", body, 400)["error"]
        assert err["param"] == "kv_transfer_params.prompt_token_ids", (bad, err)
    # the connector's keys: no KV connector here moves a prefill between servers
    body = {"messages": USER, "max_tokens": 1, "kv_transfer_params": {"do_remote_prefill": True}}
    err = post(http, "/v1/chat/completions", body, 400)["error"]
    assert err["param"] == "kv_transfer_params" and "do_remote_prefill" in err["message"]
    batch = {"messages": [USER, USER], "max_tokens": 1,
             "kv_transfer_params": {"prompt_token_ids": ids}}  # fmt: skip
    err = post(http, "/v1/chat/completions/batch", batch, 400)["error"]
    assert err["param"] == "kv_transfer_params.prompt_token_ids"


def test_a_bad_truncation_side_names_the_field(http: httpx.Client) -> None:
    for path, body in (
        ("/v1/completions", {"prompt": "x"}),
        ("/v1/chat/completions", {"messages": USER}),
    ):
        err = post(http, path, {**body, "truncation_side": "middle"}, 400)["error"]
        assert err["param"] == "truncation_side", err


# -- return_prompt_text, session_id and the render endpoints' options ----------------------


def test_return_prompt_text_streamed_comes_on_the_first_chunk(http: httpx.Client) -> None:
    body = {
        "messages": USER,
        "max_tokens": 2,
        "stream": True,
        "chat_template": EFFORT_TEMPLATE,
        "return_prompt_text": True,
    }
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        events = [
            json.loads(line[6:])
            for line in r.iter_lines()
            if line.startswith("data: ") and line != "data: [DONE]"
        ]
    texts = [e.get("prompt_text") for e in events]
    assert texts[0] == "||hi" and not any(texts[1:])


def test_no_prompt_text_unless_asked(http: httpx.Client) -> None:
    assert chat(http)["prompt_text"] is None


@pytest.mark.parametrize(
    "extra",
    [
        {"session_id": "conversation-7"},
        {"return_token_offsets": True},
        {"mm_payload": "none"},
        {"return_mm_kwargs": False},
    ],
)
def test_vllm_fields_accepted_without_a_warning(
    http: httpx.Client, caplog: pytest.LogCaptureFixture, extra: dict[str, Any]
) -> None:
    with caplog.at_level(logging.WARNING, logger="actorllm.server"):
        chat(http, **extra)
        post(http, "/v1/completions", {"prompt": "x", "max_tokens": 1, **extra})
    assert not [r for r in caplog.records if "unknown request fields" in r.getMessage()]


# -- seed, stream_options, empty prompt, logit_bias ----------------------------------------


def test_seed_minus_one_is_unseeded(http: httpx.Client, fake: FakeEngine) -> None:
    post(http, "/v1/completions", {"prompt": "x", "max_tokens": 1, "seed": -1})
    assert fake.last_request is not None and fake.last_request[1].seed is None
    post(http, "/v1/completions", {"prompt": "x", "max_tokens": 1, "seed": 7})
    assert fake.last_request[1].seed == 7


def test_stream_options_need_stream(http: httpx.Client) -> None:
    for path, body in (
        ("/v1/completions", {"prompt": "x"}),
        ("/v1/chat/completions", {"messages": USER}),
    ):
        opts = {"stream_options": {"include_usage": True}}
        err = post(http, path, {**body, **opts}, 400)["error"]
        assert err["message"] == "Stream options can only be defined when `stream=True`."
        assert err["param"] == "stream_options"
        post(http, path, {**body, "max_tokens": 1, "stream_options": None})


@pytest.mark.parametrize("body", [{"prompt": ""}, {"prompt": None, "prompt_embeds": []}, {}])
def test_empty_prompt_has_vllms_message(http: httpx.Client, body: dict[str, Any]) -> None:
    err = post(http, "/v1/completions", {"max_tokens": 5, **body}, 400)["error"]
    assert err["message"] == "Either prompt or prompt_embeds must be provided and non-empty."
    assert err["param"] == "prompt"


def test_logit_bias_errors_name_the_key(http: httpx.Client) -> None:
    body = {"prompt": "x", "max_tokens": 1}
    err = post(http, "/v1/completions", {**body, "logit_bias": {"5": 1, "abc": 2}}, 400)["error"]
    assert "['abc']" in err["message"] and err["param"] == "logit_bias"
    err = post(http, "/v1/completions", {**body, "logit_bias": {"-3": 1}}, 400)["error"]
    assert "[-3]" in err["message"] and err["param"] == "logit_bias"
    err = post(http, "/v1/completions", {**body, "logit_bias": {"99999999": 1}}, 400)["error"]
    assert "[99999999]" in err["message"] and err["param"] == "logit_bias"


@pytest.mark.parametrize("tool_choice", [None, "none", "auto"])
def test_empty_tools_is_a_400(http: httpx.Client, tool_choice: str | None) -> None:
    """vLLM (and OpenAI) refuse ``tools: []`` whatever the tool_choice; omitting it is fine."""
    extra = {} if tool_choice is None else {"tool_choice": tool_choice}
    err = chat(http, 400, tools=[], **extra)["error"]
    assert err["message"].startswith("`tools` must not be an empty array.")
    assert err["param"] == "tools"
    chat(http, tools=None)


def test_a_message_without_tool_calls_has_no_tool_calls_field(http: httpx.Client) -> None:
    """vLLM leaves out an empty ``tool_calls`` (the OpenAI SDK then reads None, not [])."""
    message = chat(http, max_tokens=2)["choices"][0]["message"]
    assert "tool_calls" not in message and message["content"]
