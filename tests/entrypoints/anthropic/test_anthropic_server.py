"""``/v1/messages`` and ``/v1/messages/count_tokens`` through the official ``anthropic``
client on a real hypercorn server over the fake engine (trio and asyncio servers): text,
streams (vLLM's event sequence), stop reasons, a hermes tool call round trip with
reasoning, token counting, errors in Anthropic's body, and a disconnect's abort."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import SCRIPT, FakeEngine
from tests.entrypoints.server_thread import ServerThread
from tests.helpers.tools import TOOLS_TEMPLATE

MODEL = "fake-model"
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
HI = [{"role": "user", "content": "Hello"}]


def words(k: int) -> str:
    return "".join(" " + SCRIPT[i % len(SCRIPT)] for i in range(k))


def prompt_of(engine: FakeEngine) -> str:
    assert engine.last_request is not None
    prompt = engine.last_request[0]
    return prompt if isinstance(prompt, str) else str(prompt.get("prompt") or "")


@pytest.fixture(scope="module")
def engine() -> FakeEngine:
    return FakeEngine(token_delay_s=0.001, max_model_len=256)


@pytest.fixture(scope="module", params=["trio", "asyncio"])
def srv(engine: FakeEngine, request: pytest.FixtureRequest) -> Iterator[ServerThread]:
    server = start_server(engine, worker_class=request.param)
    yield server
    server.stop()
    assert server.error is None


@pytest.fixture(scope="module")
def client(srv: ServerThread) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0) as c:
        yield c


def _agent(**settings: Any) -> tuple[FakeEngine, ServerThread]:
    """A model that thinks, then calls get_weather (hermes tool calls, qwen3 thinking)."""
    engine = FakeEngine(
        script="<think>Need the weather.</think>" + CALL,
        reasoning_parser="qwen3",
        max_model_len=512,
    )
    engine.tokenizer = copy.deepcopy(engine.tokenizer)  # the shared one keeps its template
    engine.tokenizer.chat_template = TOOLS_TEMPLATE  # renders tools and tool calls (Hermes)
    server = start_server(
        engine, enable_auto_tool_choice=True, tool_call_parser="hermes", **settings
    )
    return engine, server


@pytest.fixture(scope="module")
def agent() -> Iterator[tuple[FakeEngine, anthropic.Anthropic]]:
    engine, server = _agent()
    with anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0) as c:
        yield engine, c
    server.stop()
    assert server.error is None


def test_text_message(client: anthropic.Anthropic, engine: FakeEngine) -> None:
    r = client.messages.create(
        model=MODEL,
        max_tokens=4,
        messages=HI,  # type: ignore[arg-type]
        system="Be brief.",
        metadata={"user_id": "u-1"},
        # this client version no longer sends these: the body still may
        extra_body={"temperature": 0.5, "top_p": 0.9, "top_k": 3},
    )
    assert r.type == "message" and r.role == "assistant" and r.model == MODEL
    assert r.id.startswith("chatcmpl-")  # vLLM's: the chat request's id
    assert [b.type for b in r.content] == ["text"] and r.content[0].text == words(4)  # type: ignore[union-attr]
    assert r.stop_reason == "max_tokens" and r.stop_sequence is None
    assert r.usage.output_tokens == 4
    # vLLM's: without --enable-prompt-tokens-details no cache fields, every prompt token in
    # input_tokens
    assert r.usage.cache_read_input_tokens is None and r.usage.cache_creation_input_tokens is None
    _, params, _ = engine.last_request  # type: ignore[misc]
    assert (params.temperature, params.top_p, params.top_k, params.max_tokens) == (0.5, 0.9, 3, 4)
    assert "Be brief." in prompt_of(engine)
    count = client.messages.count_tokens(model=MODEL, messages=HI, system="Be brief.")
    assert count.input_tokens == r.usage.input_tokens


def test_cache_usage_with_prompt_tokens_details(engine: FakeEngine) -> None:
    """--enable-prompt-tokens-details: input_tokens leave out what the prefix cache served
    and what was written to it, as Anthropic counts them (vLLM's)."""
    server = start_server(engine, enable_prompt_tokens_details=True)
    try:
        with anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0) as c:
            r = c.messages.create(model=MODEL, max_tokens=4, messages=HI)  # type: ignore[arg-type]
            count = c.messages.count_tokens(model=MODEL, messages=HI)  # type: ignore[arg-type]
        assert (r.usage.cache_read_input_tokens, r.usage.cache_creation_input_tokens) == (2, 3)
        assert count.input_tokens == r.usage.input_tokens + 2 + 3
    finally:
        server.stop()
    assert server.error is None


def test_stop_sequence(client: anthropic.Anthropic) -> None:
    r = client.messages.create(model=MODEL, max_tokens=20, messages=HI, stop_sequences=["fox"])
    assert r.stop_reason == "stop_sequence" and r.stop_sequence == "fox"
    assert r.content[0].text == " the quick brown "  # type: ignore[union-attr]


def test_stream_events(srv: ServerThread, client: anthropic.Anthropic) -> None:
    body = {"model": MODEL, "max_tokens": 3, "messages": HI, "stream": True}
    text = httpx.post(f"{srv.url}/v1/messages", json=body, timeout=30).text
    events = [block.split("\n") for block in text.strip().split("\n\n")]
    names = [lines[0].removeprefix("event: ") for lines in events]
    data = [json.loads(lines[1].removeprefix("data: ")) for lines in events]
    assert names == [d["type"] for d in data]  # each event named by its type
    assert names == ["message_start", "content_block_start"] + ["content_block_delta"] * 3 + [
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = data[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["output_tokens"] == 0 and start["usage"]["input_tokens"] > 0
    assert "".join(d["delta"]["text"] for d in data[2:5]) == words(3)
    assert data[-2]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert data[-2]["usage"]["output_tokens"] == 3
    # the client reads the same stream into the same message as a non-streamed request
    with client.messages.stream(model=MODEL, max_tokens=3, messages=HI) as s:
        streamed = s.get_final_message()
    whole = client.messages.create(model=MODEL, max_tokens=3, messages=HI)
    assert [b.text for b in streamed.content] == [b.text for b in whole.content]  # type: ignore[union-attr]
    assert streamed.stop_reason == whole.stop_reason


def test_tool_call_round_trip(agent: tuple[FakeEngine, anthropic.Anthropic]) -> None:
    engine, client = agent
    r = client.messages.create(
        model=MODEL,
        max_tokens=100,
        tools=[WEATHER],  # type: ignore[list-item]
        messages=[{"role": "user", "content": "Weather in Paris?"}],
    )
    assert [b.type for b in r.content] == ["thinking", "tool_use"]
    thinking, use = r.content
    assert thinking.thinking == "Need the weather." and thinking.signature  # type: ignore[union-attr]
    assert use.name == "get_weather" and use.input == {"city": "Paris"}  # type: ignore[union-attr]
    assert r.stop_reason == "tool_use"
    assert "get_weather" in prompt_of(engine)  # the template rendered the tools
    # the next turn sends the call and its result back
    client.messages.create(
        model=MODEL,
        max_tokens=5,
        tools=[WEATHER],  # type: ignore[list-item]
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [b.model_dump() for b in r.content]},  # type: ignore[misc]
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": use.id, "content": "sunny, 21C"},  # type: ignore[union-attr]
                ],
            },
        ],
    )
    prompt = prompt_of(engine)
    assert '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}' in prompt
    assert "<|im_start|>tool\nsunny, 21C" in prompt


def test_tool_call_stream(agent: tuple[FakeEngine, anthropic.Anthropic]) -> None:
    _, client = agent
    with client.messages.stream(
        model=MODEL,
        max_tokens=100,
        tools=[WEATHER],  # type: ignore[list-item]
        messages=[{"role": "user", "content": "Weather in Paris?"}],
    ) as s:
        kinds = [e.type for e in s]
        final = s.get_final_message()
    assert "content_block_delta" in kinds
    assert [b.type for b in final.content] == ["thinking", "tool_use"]
    assert final.content[1].input == {"city": "Paris"}  # type: ignore[union-attr]
    assert final.stop_reason == "tool_use"


def test_count_tokens_counts_tools(agent: tuple[FakeEngine, anthropic.Anthropic]) -> None:
    _, client = agent
    bare = client.messages.count_tokens(model=MODEL, messages=HI).input_tokens
    tooled = client.messages.count_tokens(model=MODEL, messages=HI, tools=[WEATHER])  # type: ignore[list-item]
    assert tooled.input_tokens > bare > 0


def test_disabled_thinking_effort() -> None:
    """thinking disabled: "none" where the template can turn thinking off (probed), or
    --anthropic-disabled-thinking-effort's effort."""
    off = {"model": MODEL, "max_tokens": 2, "messages": HI, "thinking": {"type": "disabled"}}
    for setting, closed in (("auto", True), ("low", False)):
        engine, server = _agent(anthropic_disabled_thinking_effort=setting)
        try:
            r = httpx.post(f"{server.url}/v1/messages", json=off, timeout=30)
            assert r.status_code == 200, r.text
            assert ("<think>\n\n</think>" in prompt_of(engine)) is closed
        finally:
            server.stop()


@pytest.mark.parametrize(
    ("body", "status", "kind", "says"),
    [
        ({"model": "nope"}, 404, "NotFoundError", "The model `nope` does not exist."),
        (
            {"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
            400,
            "BadRequestError",
            "serves text models",
        ),
        ({"max_tokens": 1000}, 400, "BadRequestError", "maximum context length"),
        ({"tools": [WEATHER]}, 400, "BadRequestError", "--enable-auto-tool-choice"),
    ],
)
def test_errors_have_anthropics_body(
    srv: ServerThread, body: dict[str, Any], status: int, kind: str, says: str
) -> None:
    full = {"model": MODEL, "max_tokens": 4, "messages": HI, **body}
    r = httpx.post(f"{srv.url}/v1/messages", json=full, timeout=30)
    assert r.status_code == status
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == kind
    assert says in err["error"]["message"]


def test_a_body_that_does_not_decode_is_the_usual_400(srv: ServerThread) -> None:
    """vLLM's validation handler answers these, with the OpenAI body."""
    for path, body in (
        ("/v1/messages", {"model": MODEL, "messages": HI}),  # max_tokens is required
        ("/v1/messages/count_tokens", {"model": MODEL}),
    ):
        r = httpx.post(srv.url + path, json=body, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["code"] == 400


def test_sdk_errors(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="nope", max_tokens=4, messages=HI)  # type: ignore[arg-type]
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="nope", messages=HI)  # type: ignore[arg-type]


def test_stream_disconnect_aborts(srv: ServerThread, engine: FakeEngine) -> None:
    before = len(engine.aborted)
    body = {"model": MODEL, "max_tokens": 200, "messages": HI, "stream": True}
    with httpx.stream("POST", f"{srv.url}/v1/messages", json=body, timeout=30) as r:
        for line in r.iter_lines():
            if line.startswith("event: content_block_delta"):
                break  # one token in: leave
    deadline = time.monotonic() + 10
    while len(engine.aborted) == before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(engine.aborted) > before


@pytest.mark.parametrize("name", ["mcp_servers", "container", "context_management"])
def test_services_this_server_lacks_are_refused_by_name(srv: ServerThread, name: str) -> None:
    body = {"model": MODEL, "max_tokens": 4, "messages": HI, name: [{"type": "x"}]}
    r = httpx.post(f"{srv.url}/v1/messages", json=body, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == name
