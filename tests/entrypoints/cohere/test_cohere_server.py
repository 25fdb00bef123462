"""``/cohere/v2/chat`` over HTTP on a real hypercorn server over the fake engine (trio and
asyncio servers): text, the v2 stream's events, finish reasons, usage, logprobs, a hermes
tool call round trip with reasoning (as a thinking block, or as tool_plan with
``--no-cohere-is-reasoning-model``), documents and structured output reaching the chat
path, and errors in Cohere's body with vLLM's statuses."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import SCRIPT, FakeEngine
from tests.entrypoints.server_thread import ServerThread
from tests.helpers.tools import TOOLS_TEMPLATE

MODEL = "fake-model"
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
HI = [{"role": "user", "content": "Hello"}]


def words(k: int) -> str:
    return "".join(" " + SCRIPT[i % len(SCRIPT)] for i in range(k))


def prompt_of(engine: FakeEngine) -> str:
    assert engine.last_request is not None
    prompt = engine.last_request[0]
    return prompt if isinstance(prompt, str) else str(prompt.get("prompt") or "")


def serve(engine: FakeEngine, **settings: Any) -> ServerThread:
    """A server with the Cohere route switched on (vLLM's opt-in)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VLLM_ENABLE_COHERE_API", "1")
        return start_server(engine, **settings)


def post(server: ServerThread, body: dict[str, Any], **kw: Any) -> httpx.Response:
    return httpx.post(f"{server.url}/cohere/v2/chat", json=body, timeout=30, **kw)


def events_of(server: ServerThread, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The stream's events, ``[DONE]`` as ``{"type": "[DONE]"}``."""
    r = post(server, {**body, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    out = []
    for block in r.text.strip().split("\n\n"):
        data = block.removeprefix("data: ")
        out.append({"type": data} if data == "[DONE]" else json.loads(data))
    return out


@pytest.fixture(scope="module")
def engine() -> FakeEngine:
    return FakeEngine(token_delay_s=0.001, max_model_len=256)


@pytest.fixture(scope="module", params=["trio", "asyncio"])
def srv(engine: FakeEngine, request: pytest.FixtureRequest) -> Iterator[ServerThread]:
    server = serve(engine, worker_class=request.param)
    yield server
    server.stop()
    assert server.error is None


def _agent(**settings: Any) -> tuple[FakeEngine, ServerThread]:
    """A model that thinks, then calls get_weather (hermes tool calls, qwen3 thinking)."""
    engine = FakeEngine(
        script="<think>Need the weather.</think>" + CALL,
        reasoning_parser="qwen3",
        max_model_len=512,
    )
    engine.tokenizer = copy.deepcopy(engine.tokenizer)  # the shared one keeps its template
    engine.tokenizer.chat_template = TOOLS_TEMPLATE  # renders tools and tool calls (Hermes)
    server = serve(engine, enable_auto_tool_choice=True, tool_call_parser="hermes", **settings)
    return engine, server


@pytest.fixture(scope="module")
def agent() -> Iterator[tuple[FakeEngine, ServerThread]]:
    engine, server = _agent()
    yield engine, server
    server.stop()
    assert server.error is None


def test_text_answer(srv: ServerThread, engine: FakeEngine) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "system", "content": "Be brief."}, *HI],
        "max_tokens": 4,
        **{"temperature": 0.5, "p": 0.9, "k": 3, "seed": 7, "frequency_penalty": 0.25},
    }
    r = post(srv, body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["id"].startswith("chatcmpl-")  # vLLM's: the chat request's id
    assert out["finish_reason"] == "MAX_TOKENS"
    assert out["message"] == {"role": "assistant", "content": [{"type": "text", "text": words(4)}]}
    usage = out["usage"]
    assert usage["billed_units"] == usage["tokens"]
    assert usage["tokens"]["output_tokens"] == 4.0 and usage["tokens"]["input_tokens"] > 0
    # vLLM's: cached_tokens only with --enable-prompt-tokens-details
    assert "cached_tokens" not in usage and "logprobs" not in out
    _, params, _ = engine.last_request  # type: ignore[misc]
    assert (params.temperature, params.top_p, params.top_k, params.seed) == (0.5, 0.9, 3, 7)
    assert (params.frequency_penalty, params.max_tokens) == (0.25, 4)
    assert "Be brief." in prompt_of(engine)


def test_stop_sequence_and_eos(srv: ServerThread) -> None:
    r = post(srv, {"model": MODEL, "messages": HI, "max_tokens": 20, "stop_sequences": ["fox"]})
    out = r.json()
    assert out["finish_reason"] == "STOP_SEQUENCE"
    assert out["message"]["content"][0]["text"] == " the quick brown "


def test_logprobs(srv: ServerThread) -> None:
    r = post(srv, {"model": MODEL, "messages": HI, "max_tokens": 3, "logprobs": True})
    items = r.json()["logprobs"]
    assert len(items) == 3
    assert all(len(i["token_ids"]) == 1 and len(i["logprobs"]) == 1 for i in items)
    assert "".join(i["text"] for i in items) == words(3)


def test_a_stream_carries_logprobs_on_its_content(srv: ServerThread) -> None:
    body = {"model": MODEL, "messages": HI, "max_tokens": 3, "logprobs": True}
    deltas = [e for e in events_of(srv, body) if e["type"] == "content-delta"]
    items = [d["logprobs"] for d in deltas]
    assert "".join(i["text"] for i in items) == words(3)
    assert sum(len(i["token_ids"]) for i in items) == 3


def test_stream_events(srv: ServerThread) -> None:
    events = events_of(srv, {"model": MODEL, "messages": HI, "max_tokens": 3})
    kinds = [e["type"] for e in events]
    assert kinds == ["message-start", "content-start"] + ["content-delta"] * 3 + [
        "content-end",
        "message-end",
        "[DONE]",
    ]
    start, opened, *deltas = events[:5]
    assert start["id"].startswith("chatcmpl-")
    assert start["delta"] == {"message": {"role": "assistant"}}
    assert opened["index"] == 0
    assert opened["delta"] == {"message": {"content": {"type": "text", "text": ""}}}
    assert "".join(d["delta"]["message"]["content"]["text"] for d in deltas) == words(3)
    end = events[-2]
    assert end["id"] == start["id"] and end["delta"]["finish_reason"] == "MAX_TOKENS"
    assert end["delta"]["usage"]["tokens"]["output_tokens"] == 3.0


def test_tool_call_round_trip(agent: tuple[FakeEngine, ServerThread]) -> None:
    engine, server = agent
    first = [{"role": "user", "content": "Weather in Paris?"}]
    r = post(server, {"model": MODEL, "messages": first, "tools": [WEATHER]})
    out = r.json()
    assert out["finish_reason"] == "TOOL_CALL"
    msg = out["message"]
    assert msg["content"] == [{"type": "thinking", "thinking": "Need the weather."}]
    [call] = msg["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert "get_weather" in prompt_of(engine)  # the template rendered the tools
    # the next turn sends the call and its result back, the result as a document
    result = {"type": "document", "document": {"id": "w1", "data": {"sky": "sunny"}}}
    history = [
        *first,
        msg,
        {"role": "tool", "tool_call_id": call["id"], "content": [result]},
    ]
    r = post(server, {"model": MODEL, "messages": history, "tools": [WEATHER], "max_tokens": 5})
    assert r.status_code == 200, r.text
    prompt = prompt_of(engine)
    assert '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}' in prompt
    assert '<|im_start|>tool\n{"data": {"sky": "sunny"}, "id": "w1"}' in prompt


def test_tool_call_stream(agent: tuple[FakeEngine, ServerThread]) -> None:
    _, server = agent
    body = {"model": MODEL, "messages": HI, "tools": [WEATHER]}
    events = events_of(server, body)
    kinds = [e["type"] for e in events]
    # thinking block, then the call: each block closed before the next starts
    assert kinds[:2] == ["message-start", "content-start"]
    first_call = kinds.index("tool-call-start")
    assert kinds[first_call - 1] == "content-end"
    assert kinds[-3:] == ["tool-call-end", "message-end", "[DONE]"]
    thinking = "".join(
        e["delta"]["message"]["content"]["thinking"] for e in events if e["type"] == "content-delta"
    )
    assert thinking == "Need the weather."
    start = events[first_call]["delta"]["message"]["tool_calls"]
    args = start["function"]["arguments"] + "".join(
        e["delta"]["message"]["tool_calls"]["function"]["arguments"]
        for e in events
        if e["type"] == "tool-call-delta"
    )
    assert start["function"]["name"] == "get_weather" and json.loads(args) == {"city": "Paris"}
    assert events[-2]["delta"]["finish_reason"] == "TOOL_CALL"


def test_non_reasoning_model_plans() -> None:
    """--no-cohere-is-reasoning-model: the reasoning of a turn with calls is its
    tool_plan, streamed as tool-plan-delta events."""
    _, server = _agent(cohere_is_reasoning_model=False)
    try:
        body = {"model": MODEL, "messages": HI, "tools": [WEATHER]}
        msg = post(server, body).json()["message"]
        assert msg["tool_plan"] == "Need the weather." and "content" not in msg
        events = events_of(server, body)
        plan = [e for e in events if e["type"] == "tool-plan-delta"]
        assert "".join(e["delta"]["message"]["tool_plan"] for e in plan) == "Need the weather."
        assert "content-start" not in [e["type"] for e in events]
    finally:
        server.stop()


DOCS_TEMPLATE = (
    "{% for d in documents %}[{{ d.id }}: {{ d.data.title }}]{% endfor %}"
    "safety={{ safety_mode }} thinking={{ thinking.type }} format={{ cohere_format }}\n"
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
)


def test_documents_and_options_reach_the_template() -> None:
    engine = FakeEngine(max_model_len=256)
    engine.tokenizer = copy.deepcopy(engine.tokenizer)
    engine.tokenizer.chat_template = DOCS_TEMPLATE
    server = serve(engine, cohere_format="cmd3")
    try:
        body = {
            "model": MODEL,
            "messages": [{"role": "developer", "content": "Cite."}, *HI],
            "documents": [{"id": "d1", "data": {"title": "T"}}, "plain"],
            "safety_mode": "STRICT",
            "thinking": {"type": "disabled"},
            "max_tokens": 2,
        }
        assert post(server, body).status_code == 200
        prompt = prompt_of(engine)
        assert prompt.startswith("[d1: T][doc_1: ]safety=strict thinking=disabled format=cmd3")
        assert "system: Cite.\nuser: Hello" in prompt  # developer is system
    finally:
        server.stop()


def test_response_format(srv: ServerThread, engine: FakeEngine) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fmt = {"type": "json_object", "json_schema": schema}
    body = {"model": MODEL, "messages": HI, "max_tokens": 2, "response_format": fmt}
    assert post(srv, body).status_code == 200
    _, params, _ = engine.last_request  # type: ignore[misc]
    assert params.structured_outputs is not None and params.structured_outputs.json == schema
    body["response_format"] = {"type": "json_object"}
    assert post(srv, body).status_code == 200
    _, params, _ = engine.last_request  # type: ignore[misc]
    assert params.structured_outputs is not None and params.structured_outputs.json_object


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"model": "nope"}, 404, "The model `nope` does not exist."),
        ({"model": None}, 400, "model"),
        ({"messages": []}, 400, "messages"),
        ({"max_tokens": 1000}, 400, "maximum context length"),
        ({"tools": [WEATHER]}, 400, "--enable-auto-tool-choice"),
        ({"tool_choice": "ANY"}, 400, "tool_choice"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
                ]
            },
            400,
            "serves text models",
        ),
        (
            {
                "messages": [
                    *HI,
                    {"role": "assistant", "content": "a", "citations": [{"text": "a"}]},
                ]
            },
            400,
            "messages[1].citations",
        ),
    ],
)
def test_errors_have_coheres_body(
    srv: ServerThread, body: dict[str, Any], status: int, says: str
) -> None:
    full = {"model": MODEL, "max_tokens": 4, "messages": HI, **body}
    r = post(srv, full, headers={"X-Request-Id": "req-1"})
    assert r.status_code == status
    err = r.json()
    assert set(err) == {"message", "id"} and err["id"] == "req-1"
    assert says in err["message"]


def test_a_body_not_declared_json_has_coheres_body(srv: ServerThread) -> None:
    """vLLM's validate_json_request 400, rewritten into Cohere's body as vLLM does."""
    body = b'{"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}'
    r = httpx.post(
        srv.url + "/cohere/v2/chat",
        content=body,
        headers={"content-type": "text/plain", "X-Request-Id": "req-2"},
        timeout=30,
    )
    assert r.status_code == 400
    said = "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed"
    assert r.json() == {"message": said, "id": "req-2"}


def test_a_pooling_model_cannot_chat() -> None:
    engine = FakeEngine()
    server = serve(engine)
    try:
        engine.pooling_model = object()  # type: ignore[assignment]  # is it a pooling model?
        r = post(server, {"model": MODEL, "messages": HI})
        assert r.status_code == 501
        assert r.json() == {"message": "The model does not support the Cohere v2 chat API."}
    finally:
        engine.pooling_model = None
        server.stop()


def test_the_route_is_opt_in(engine: FakeEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("VLLM_ENABLE_COHERE_API", "ACTORLLM_ENABLE_COHERE_API"):
        monkeypatch.delenv(name, raising=False)
    server = start_server(engine)
    try:
        assert post(server, {"model": MODEL, "messages": HI}).status_code == 404
    finally:
        server.stop()


class FailingEngine(FakeEngine):
    """Fails after its second output: a stream that started must end Cohere's way."""

    async def generate(self, *args: Any, **kwargs: Any) -> Any:
        n = 0
        async for out in super().generate(*args, **kwargs):
            yield out
            n += 1
            if n == 2:
                raise RuntimeError("the worker fell over")


def test_a_stream_the_engine_fails_ends_with_an_error() -> None:
    server = serve(FailingEngine(token_delay_s=0.001))
    try:
        events = events_of(server, {"model": MODEL, "messages": HI, "max_tokens": 8})
        assert events[0]["type"] == "message-start" and events[-1] == {"type": "[DONE]"}
        end = events[-2]
        assert end["type"] == "message-end" and end["delta"]["finish_reason"] == "ERROR"
        assert end["delta"]["error"].startswith("Internal server error")  # no internals
    finally:
        server.stop()


def test_engine_dead_is_503(engine: FakeEngine, srv: ServerThread) -> None:
    engine.is_dead = True
    try:
        r = post(srv, {"model": MODEL, "messages": HI, "max_tokens": 2})
        assert r.status_code == 503 and set(r.json()) == {"message"}
    finally:
        engine.is_dead = False


def test_the_document_states_the_route(srv: ServerThread, monkeypatch: pytest.MonkeyPatch) -> None:
    import jsonschema

    monkeypatch.setenv("VLLM_ENABLE_COHERE_API", "1")
    doc = httpx.get(f"{srv.url}/openapi.json", timeout=30).json()
    op = doc["paths"]["/cohere/v2/chat"]["post"]
    assert {"200", "400", "404", "501"} <= set(op["responses"])
    root = {"components": doc["components"]}
    answer = post(srv, {"model": MODEL, "messages": HI, "max_tokens": 2, "logprobs": True}).json()
    jsonschema.validate(answer, {**root, "$ref": "#/components/schemas/CohereChatResponse"})
    body = {"model": MODEL, "messages": HI, "documents": ["d"], "thinking": {"type": "enabled"}}
    jsonschema.validate(body, {**root, "$ref": "#/components/schemas/CohereChatRequest"})
    monkeypatch.delenv("VLLM_ENABLE_COHERE_API")
    assert "/cohere/v2/chat" not in httpx.get(f"{srv.url}/openapi.json", timeout=30).json()["paths"]


def test_the_api_key_guards_the_route(engine: FakeEngine) -> None:
    server = serve(engine, api_key="k")
    try:
        body = {"model": MODEL, "messages": HI, "max_tokens": 2}
        assert post(server, body).status_code == 401
        assert post(server, body, headers={"Authorization": "Bearer k"}).status_code == 200
    finally:
        server.stop()
