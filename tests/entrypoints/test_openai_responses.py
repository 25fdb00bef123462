"""The Responses API (``/v1/responses``) through the official ``openai`` client's
``client.responses`` on a real hypercorn server over the fake engine: create, stream (vLLM's
event sequence), function tools round-trip, reasoning items, ``text.format``, the store
(``previous_response_id``, retrieve, cancel) and the errors, by name."""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import openai
import pytest

from actorllm.entrypoints.openai.fields import UNSUPPORTED
from actorllm.entrypoints.openai.responses.request import ResponsesRequest
from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import SCRIPT, FakeEngine, demo_tokenizer
from tests.entrypoints.server_thread import ServerThread
from tests.helpers.tools import TOOLS_TEMPLATE

MODEL = "fake-model"
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def words(k: int) -> str:
    return "".join(" " + SCRIPT[i % len(SCRIPT)] for i in range(k))


@contextmanager
def store_env(value: str | None) -> Iterator[None]:
    """The store's switch as the server reads it at start (vLLM's spelling too)."""
    saved = {k: os.environ.pop(k, None) for k in ("ACTORLLM_ENABLE_RESPONSES_API_STORE",)}
    if value is not None:
        os.environ["ACTORLLM_ENABLE_RESPONSES_API_STORE"] = value
    try:
        yield
    finally:
        os.environ.pop("ACTORLLM_ENABLE_RESPONSES_API_STORE", None)
        os.environ.update({k: v for k, v in saved.items() if v is not None})


def _client(srv: ServerThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def engine() -> FakeEngine:
    return FakeEngine(token_delay_s=0.001, max_model_len=256)


@pytest.fixture(scope="module")
def srv(engine: FakeEngine) -> Iterator[ServerThread]:
    with store_env("1"):
        server = start_server(engine)
    yield server
    server.stop()
    assert server.error is None


@pytest.fixture(scope="module")
def client(srv: ServerThread) -> Iterator[openai.OpenAI]:
    with _client(srv) as c:
        yield c


@pytest.fixture(scope="module")
def agent() -> Iterator[openai.OpenAI]:
    """A model that thinks, then calls get_weather (hermes tool calls, qwen3 thinking)."""
    engine = FakeEngine(
        script="<think>Need the weather.</think>" + CALL,
        reasoning_parser="qwen3",
        max_model_len=512,
    )
    engine.tokenizer = copy.deepcopy(engine.tokenizer)  # the shared one keeps its template
    engine.tokenizer.chat_template = TOOLS_TEMPLATE  # renders tools and tool calls (Hermes)
    with store_env("1"):
        server = start_server(engine, enable_auto_tool_choice=True, tool_call_parser="hermes")
    with _client(server) as c:
        yield c
    server.stop()
    assert server.error is None


# -- create ---------------------------------------------------------------------------------


def test_create_text_input(client: openai.OpenAI, engine: FakeEngine) -> None:
    r = client.responses.create(
        model=MODEL,
        input="Hello",
        instructions="Be brief.",
        max_output_tokens=4,
        temperature=0.5,
        top_p=0.9,
        metadata={"k": "v"},
        user="u-1",
    )
    assert r.object == "response" and r.id.startswith("resp_") and r.model == MODEL
    assert r.output_text == words(4)
    assert r.status == "incomplete"  # it ran out of max_output_tokens
    assert r.incomplete_details is not None
    assert r.incomplete_details.reason == "max_output_tokens"
    assert (r.temperature, r.top_p, r.max_output_tokens) == (0.5, 0.9, 4)
    assert r.metadata == {"k": "v"} and r.user == "u-1" and r.instructions == "Be brief."
    assert r.tool_choice == "none" and r.tools == []  # vLLM's echo: "auto" without tools
    assert r.usage is not None and r.usage.output_tokens == 4
    assert r.usage.total_tokens == r.usage.input_tokens + 4
    assert r.usage.input_tokens_details.cached_tokens == 2
    assert r.usage.input_tokens_details.cache_write_tokens == 3  # type: ignore[attr-defined]
    assert r.usage.output_tokens_details.reasoning_tokens == 0
    prompt, params, _ = engine.last_request  # type: ignore[misc]
    assert params.temperature == 0.5 and params.top_p == 0.9 and params.max_tokens == 4
    text = prompt if isinstance(prompt, str) else prompt.get("prompt") or ""
    assert "Be brief." in text and "Hello" in text  # instructions: the system message


@pytest.mark.parametrize("stream", [False, True])
def test_response_messages_are_the_raw_prompt_and_answer(srv: ServerThread, stream: bool) -> None:
    """enable_response_messages on a model other than gpt-oss: vLLM's raw_message_tokens,
    the rendered prompt and the answer, text and token ids."""
    body = {"model": MODEL, "input": "Hello", "max_output_tokens": 3, "stream": stream,
            "enable_response_messages": True}  # fmt: skip
    text = httpx.post(f"{srv.url}/v1/responses", json=body, timeout=30).text
    if stream:  # the last event: response.completed
        data = [ln[6:] for ln in text.splitlines() if ln.startswith("data: ")]
        text = json.dumps(json.loads(data[-1])["response"])
    response = json.loads(text)
    [prompt] = response["input_messages"]
    assert prompt["type"] == "raw_message_tokens" and "Hello" in prompt["message"]
    assert len(prompt["tokens"]) == response["usage"]["input_tokens"]
    [answer] = response["output_messages"]
    assert answer == {"type": "raw_message_tokens", "message": words(3), "tokens": answer["tokens"]}
    assert len(answer["tokens"]) == 3 and all(isinstance(t, int) for t in answer["tokens"])


def test_create_message_items_and_status(client: openai.OpenAI) -> None:
    r = client.responses.create(
        model=MODEL,
        input=[
            {"role": "developer", "content": "Answer in words."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Q"}]},
        ],
        max_output_tokens=5,
        extra_body={"stop": ["fox"]},  # vLLM's extension
    )
    msg = r.output[0]
    assert msg.type == "message" and msg.role == "assistant" and msg.status == "completed"
    assert r.output_text == " the quick brown " and r.status == "completed"


def test_output_logprobs_on_include(client: openai.OpenAI) -> None:
    r = client.responses.create(
        model=MODEL,
        input="x",
        max_output_tokens=2,
        include=["message.output_text.logprobs"],
        top_logprobs=2,
    )
    part = r.output[0].content[0]  # type: ignore[union-attr]
    assert part.type == "output_text" and part.logprobs is not None
    assert [lp.token for lp in part.logprobs] == [" the", " quick"]
    assert all(len(lp.top_logprobs) == 2 and lp.bytes for lp in part.logprobs)


def test_text_format_json_schema_is_the_constraint(
    client: openai.OpenAI, engine: FakeEngine
) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    fmt = {"type": "json_schema", "name": "thing", "schema": schema, "strict": True}
    r = client.responses.create(model=MODEL, input="x", max_output_tokens=2, text={"format": fmt})
    assert r.text is not None and r.text.format is not None and r.text.format.type == "json_schema"
    so = engine.last_request[1].structured_outputs  # type: ignore[index]
    assert so is not None and so.json == schema and so.disable_additional_properties
    client.responses.create(
        model=MODEL, input="x", max_output_tokens=2, text={"format": {"type": "json_object"}}
    )
    assert engine.last_request[1].structured_outputs.json_object  # type: ignore[index, union-attr]


# -- streaming ------------------------------------------------------------------------------


def test_stream_event_sequence(client: openai.OpenAI) -> None:
    with client.responses.stream(model=MODEL, input="Hi", max_output_tokens=3) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 3,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].response.status == "in_progress"  # type: ignore[union-attr]
    added, done = events[2], events[-2]
    assert added.item.id == done.item.id == final.output[0].id  # type: ignore[union-attr]
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == words(3)
    assert final.output_text == words(3) and final.usage is not None


def test_stream_wire_format_is_vllms(srv: ServerThread) -> None:
    """``event:`` names each ``data:``; no ``[DONE]`` (response.completed ends it)."""
    body = {"model": MODEL, "input": "Hi", "max_output_tokens": 1, "stream": True}
    text = httpx.post(srv.url + "/v1/responses", json=body, timeout=30).text
    blocks = [b for b in text.split("\n\n") if b]
    assert blocks[0].startswith("event: response.created\ndata: {")
    assert blocks[-1].startswith("event: response.completed\n") and "[DONE]" not in text


# -- tools and reasoning --------------------------------------------------------------------


def test_chat_usage_counts_reasoning_tokens_as_vllm(
    agent: openai.OpenAI, client: openai.OpenAI
) -> None:
    """A server with a reasoning parser: usage.completion_tokens_details.reasoning_tokens,
    the answer's and a stream's final usage chunk's; without one the field is absent."""
    expected = len(demo_tokenizer().encode("Need the weather.", add_special_tokens=False))
    hi = [{"role": "user", "content": "Weather in Paris?"}]
    r = agent.chat.completions.create(model=MODEL, messages=hi)  # type: ignore[arg-type]
    assert r.choices[0].message.reasoning_content == "Need the weather."  # type: ignore[attr-defined]
    assert r.usage is not None and r.usage.completion_tokens_details is not None
    assert r.usage.completion_tokens_details.reasoning_tokens == expected > 0
    chunks = list(
        agent.chat.completions.create(
            model=MODEL,
            messages=hi,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    last = chunks[-1].usage
    assert last is not None and last.completion_tokens_details is not None
    assert last.completion_tokens_details.reasoning_tokens == expected
    plain = client.chat.completions.create(model=MODEL, messages=hi, max_tokens=2)  # type: ignore[arg-type]
    assert plain.usage is not None and plain.usage.completion_tokens_details is None


def test_function_call_round_trip(agent: openai.OpenAI) -> None:
    r = agent.responses.create(model=MODEL, input="Weather in Paris?", tools=[WEATHER])  # type: ignore[list-item]
    kinds = [item.type for item in r.output]
    assert kinds == ["reasoning", "function_call"]
    reasoning, call = r.output
    assert reasoning.content[0].text == "Need the weather."  # type: ignore[union-attr, index]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    assert r.usage is not None and r.usage.output_tokens_details.reasoning_tokens > 0
    # The client runs the function and sends back its output with the call.
    follow = agent.responses.create(
        model=MODEL,
        tools=[WEATHER],  # type: ignore[list-item]
        input=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "type": "function_call",
                "call_id": call.call_id,  # type: ignore[union-attr]
                "name": "get_weather",
                "arguments": call.arguments,  # type: ignore[union-attr]
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},  # type: ignore[union-attr]
        ],
    )
    assert follow.status == "completed"


def test_function_call_stream_events(agent: openai.OpenAI) -> None:
    with agent.responses.stream(model=MODEL, input="Weather?", tools=[WEATHER]) as stream:  # type: ignore[list-item]
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert "response.reasoning_text.delta" in kinds and "response.reasoning_text.done" in kinds
    assert "response.function_call_arguments.delta" in kinds
    assert kinds[-3:] == [
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [o.type for o in final.output] == ["reasoning", "function_call"]
    assert json.loads(final.output[1].arguments) == {"city": "Paris"}  # type: ignore[union-attr]


def test_include_reasoning_false_drops_the_item(agent: openai.OpenAI) -> None:
    r = agent.responses.create(
        model=MODEL,
        input="x",
        tools=[WEATHER],
        extra_body={"include_reasoning": False},  # type: ignore[list-item]
    )
    assert [o.type for o in r.output] == ["function_call"]


def test_tool_choice_none_leaves_calls_unparsed(agent: openai.OpenAI) -> None:
    r = agent.responses.create(model=MODEL, input="x", tools=[WEATHER], tool_choice="none")  # type: ignore[list-item]
    assert [o.type for o in r.output] == ["reasoning", "message"]
    assert "<tool_call>" in r.output_text


# -- the store ------------------------------------------------------------------------------


def test_store_retrieve_and_previous_response_id(client: openai.OpenAI, engine: FakeEngine) -> None:
    first = client.responses.create(model=MODEL, input="My name is Ada.", max_output_tokens=2)
    got = client.responses.retrieve(first.id)
    assert got.id == first.id and got.output_text == first.output_text
    second = client.responses.create(
        model=MODEL, input="What is my name?", previous_response_id=first.id, max_output_tokens=2
    )
    assert second.previous_response_id == first.id
    prompt = engine.last_request[0]  # type: ignore[index]
    text = prompt if isinstance(prompt, str) else prompt.get("prompt") or ""
    assert "My name is Ada." in text and first.output_text in text and "What is my name?" in text


def test_store_false_is_not_kept(client: openai.OpenAI) -> None:
    r = client.responses.create(model=MODEL, input="x", max_output_tokens=1, store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)


def test_cancel(client: openai.OpenAI) -> None:
    r = client.responses.create(model=MODEL, input="x", max_output_tokens=1)
    with pytest.raises(openai.BadRequestError, match="Cannot cancel a synchronous response"):
        client.responses.cancel(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_missing")


def _until(client: openai.OpenAI, rid: str, statuses: set[str]) -> Any:
    for _ in range(500):  # bounded: 5 s
        r = client.responses.retrieve(rid)
        if r.status in statuses:
            return r
        time.sleep(0.01)
    raise AssertionError(f"{rid} never reached {statuses}: {r.status}")


def test_background_runs_beside_the_server(client: openai.OpenAI) -> None:
    r = client.responses.create(model=MODEL, input="x", max_output_tokens=5, background=True)
    assert r.status == "queued" and r.background and r.output == []
    done = _until(client, r.id, {"completed", "incomplete"})
    assert done.output_text and done.usage is not None and done.usage.output_tokens == 5
    with pytest.raises(openai.BadRequestError, match="Cannot cancel a synchronous response"):
        client.responses.cancel(r.id)  # finished: nothing to cancel


def _check_sequence(events: list[Any], first: int = 0) -> None:
    assert [e.sequence_number for e in events] == list(range(first, first + len(events)))


def test_background_stream_is_kept_and_replayed(client: openai.OpenAI) -> None:
    with client.responses.create(
        model=MODEL, input="x", max_output_tokens=5, background=True, stream=True
    ) as stream:
        events = list(stream)
    _check_sequence(events)
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    rid = events[0].response.id
    stored = client.responses.retrieve(rid)
    assert stored.status == events[-1].response.status == "incomplete"  # max_output_tokens
    assert stored.background
    assert stored.output_text == events[-1].response.output_text == words(5)
    with client.responses.retrieve(rid, stream=True) as again:
        assert [e.model_dump() for e in again] == [e.model_dump() for e in events]
    with client.responses.retrieve(rid, stream=True, starting_after=2) as rest:
        assert [e.model_dump() for e in rest] == [e.model_dump() for e in events[3:]]
    with client.responses.retrieve(rid, stream=True, starting_after=len(events)) as none:
        assert list(none) == []


def test_what_has_no_events_to_replay_is_refused_by_name(client: openai.OpenAI) -> None:
    sync = client.responses.create(model=MODEL, input="x", max_output_tokens=1)
    plain = client.responses.create(model=MODEL, input="x", max_output_tokens=1, background=True)
    for rid in (sync.id, plain.id):
        with pytest.raises(openai.BadRequestError, match="no events to stream") as info:
            client.responses.retrieve(rid, stream=True)
        assert info.value.body["param"] == "response_id"  # type: ignore[index]
    for query, param in (
        ({"starting_after": 1}, "starting_after"),  # without stream
        ({"stream": True, "starting_after": -1}, "starting_after"),
        ({"include": ["message.output_text.logprobs"]}, "include"),
    ):
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.retrieve(sync.id, **query)  # type: ignore[call-overload]
        assert info.value.body["param"] == param  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_missing", stream=True)


def test_a_reader_that_leaves_changes_nothing_and_a_late_one_follows_the_run() -> None:
    engine = FakeEngine(token_delay_s=0.02, max_model_len=256)  # 40 tokens: ~0.8 s
    with store_env("1"):
        server = start_server(engine)
    try:
        with _client(server) as c:
            with c.responses.create(
                model=MODEL, input="x", max_output_tokens=40, background=True, stream=True
            ) as stream:
                head = [next(stream) for _ in range(4)]  # then the connection closes
            rid = head[0].response.id
            with c.responses.retrieve(rid, stream=True, starting_after=3) as rest:
                tail = list(rest)
            _check_sequence(head + tail)
            assert tail[-1].type == "response.completed"
            assert tail[-1].response.output_text == words(40)
            assert c.responses.retrieve(rid).status == "incomplete"
            # Cancelled mid-run: every reader's stream ends, the request is aborted.
            with c.responses.create(
                model=MODEL, input="x", max_output_tokens=200, background=True, stream=True
            ) as stream:
                first = next(stream)
                assert c.responses.cancel(first.response.id).status == "cancelled"
                assert [e.type for e in stream][-1] != "response.completed"
            assert engine.aborted == [first.response.id] and not engine.open
    finally:
        server.stop()
    assert server.error is None


def test_cancel_stops_a_background_run_and_aborts_its_request() -> None:
    engine = FakeEngine(token_delay_s=0.05, max_model_len=256)  # 200 tokens: 10 s
    with store_env("1"):
        server = start_server(engine)
    try:
        with _client(server) as c:
            r = c.responses.create(model=MODEL, input="x", max_output_tokens=200, background=True)
            assert c.responses.retrieve(r.id).status == "queued"  # running: vLLM's status
            cancelled = c.responses.cancel(r.id)
            assert cancelled.status == "cancelled"
            assert c.responses.retrieve(r.id).status == "cancelled"
            assert engine.aborted == [r.id] and not engine.open
    finally:
        server.stop()
    assert server.error is None


def test_unknown_ids_are_404_with_openais_body(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.retrieve("resp_missing")
    assert err.value.body == {
        "message": "Response with id 'resp_missing' not found.",
        "type": "invalid_request_error",
        "param": "response_id",
        "code": 404,
    }
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=MODEL, input="x", previous_response_id="resp_missing")


def test_store_is_off_by_default_as_vllm(engine: FakeEngine) -> None:
    with store_env(None):
        server = start_server(engine)
    try:
        with _client(server) as c:
            r = c.responses.create(model=MODEL, input="x", max_output_tokens=1)  # store=True
            with pytest.raises(openai.NotFoundError):
                c.responses.retrieve(r.id)
            with pytest.raises(openai.BadRequestError, match="VLLM_ENABLE_RESPONSES_API_STORE"):
                c.responses.create(model=MODEL, input="x", background=True)
    finally:
        server.stop()


# -- refusals, by name -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param", "words_"),
    [
        ({"tools": [{"type": "web_search"}]}, "tools", "'web_search' tool"),
        ({"tools": [{"type": "file_search", "vector_store_ids": ["v"]}]}, "tools", "file_search"),
        ({"tools": [{"type": "mcp", "server_label": "s"}]}, "tools", "'mcp' tool"),
        ({"tools": [{"type": "computer_use_preview"}]}, "tools", "computer_use_preview"),
        ({"tools": [{"type": "code_interpreter"}]}, "tools", "code_interpreter"),
        ({"tools": [{"type": "image_generation"}]}, "tools", "image_generation"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input", "item_reference"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
            "input",
            "input_image",
        ),
        ({"prompt": {"id": "p"}}, "prompt", "prompt template is not supported"),
        ({"include": ["file_search_call.results"]}, "include", "file_search_call.results"),
        ({"service_tier": "flex"}, "service_tier", "flex"),
        ({"text": {"verbosity": "low"}}, "text", "verbosity"),
        ({"temperature": -1}, "temperature", "temperature"),
        (
            {"enable_response_messages": True, "background": True},
            "enable_response_messages",
            "background",
        ),
        ({"previous_input_messages": []}, "previous_input_messages", "gpt-oss"),
        ({"tool_choice": "required"}, "tool_choice", "'required' must be specified with 'tools'"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}},
            "tool_choice",
            "not found in 'tools'",
        ),
        (
            {"text": {"format": {"type": "json_object"}}, "structured_outputs": {"regex": "a"}},
            "structured_outputs",
            "Cannot specify both",
        ),
    ],
)
def test_refused_by_name(srv: ServerThread, body: dict[str, Any], param: str, words_: str) -> None:
    r = httpx.post(srv.url + "/v1/responses", json={"input": "x", **body}, timeout=30)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and words_ in error["message"]


def test_auto_tool_choice_needs_the_servers_parser(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="enable-auto-tool-choice") as err:
        client.responses.create(model=MODEL, input="x", tools=[WEATHER])  # type: ignore[list-item]
    assert err.value.body["param"] == "tool_choice"  # type: ignore[index]


def test_a_prompt_that_fills_the_context_names_input(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="max_model_len") as err:
        client.responses.create(model=MODEL, input="word " * 400)
    assert err.value.body["param"] == "input"  # type: ignore[index]
    r = client.responses.create(model=MODEL, input="word " * 400, truncation="auto")
    assert r.status in ("completed", "incomplete")  # the prompt's start was cut


# -- every field of vLLM's ResponsesRequest ---------------------------------------------------

# vLLM 0.32's ``ResponsesRequest.model_fields`` (vllm/entrypoints/openai/responses/protocol.py).
VLLM_RESPONSES_FIELDS = """
background cache_salt chat_template_kwargs ec_transfer_params enable_response_messages
frequency_penalty ignore_eos include include_reasoning include_stop_str_in_output input
instructions kv_transfer_params logit_bias max_output_tokens max_tool_calls
media_io_kwargs metadata min_p mm_payload mm_processor_kwargs model parallel_tool_calls
presence_penalty previous_input_messages previous_response_id priority prompt
prompt_cache_key reasoning repetition_penalty request_id return_mm_kwargs seed
service_tier session_id skip_special_tokens stop stop_token_ids store stream
structured_outputs temperature text tool_choice tools top_k top_logprobs top_p truncation
user vllm_xargs watermarking
""".split()  # noqa: SIM905


def test_every_vllm_field_is_known() -> None:
    """None falls through to "unknown field, one warning": declared, or refused by name."""
    known = set(ResponsesRequest.__struct_fields__) | set(UNSUPPORTED)
    assert [f for f in VLLM_RESPONSES_FIELDS if f not in known] == []


def test_sampling_fields_reach_the_engine(client: openai.OpenAI, engine: FakeEngine) -> None:
    client.responses.create(
        model=MODEL,
        input="x",
        max_output_tokens=2,
        extra_body={
            "top_k": 5,
            "min_p": 0.1,
            "repetition_penalty": 1.2,
            "presence_penalty": 0.5,
            "frequency_penalty": 0.25,
            "seed": 7,
            "stop_token_ids": [3],
            "ignore_eos": True,
            "logit_bias": {"5": 1.0},
            "skip_special_tokens": False,
            "include_stop_str_in_output": True,
            "prompt_cache_key": "k",
            "session_id": "s",
        },
    )
    p = engine.last_request[1]  # type: ignore[index]
    assert (p.top_k, p.min_p, p.repetition_penalty, p.seed) == (5, 0.1, 1.2, 7)
    assert (p.presence_penalty, p.frequency_penalty) == (0.5, 0.25)
    assert p.stop_token_ids == [3] and p.ignore_eos and p.logit_bias == {5: 1.0}
    assert not p.skip_special_tokens and p.include_stop_str_in_output
