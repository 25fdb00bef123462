"""The responses store (bounded, least recently used out; vLLM's switch) and the stream's
event writer on its own (several calls, reasoning then text)."""

from __future__ import annotations

import pytest

from actorllm.entrypoints.openai.protocol.chat_response import (
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
)
from actorllm.entrypoints.openai.responses.events import EventWriter
from actorllm.entrypoints.openai.responses.response import ResponsesResponse
from actorllm.entrypoints.openai.responses.store import MAX_STORED, ResponseStore


def response(rid: str) -> ResponsesResponse:
    return ResponsesResponse(id=rid, model="m", max_output_tokens=1, status="completed")


def test_least_recently_used_is_dropped_beyond_the_bound() -> None:
    store = ResponseStore(enabled=True, max_size=2)
    store.put(response("a"), [])
    store.put(response("b"), [])
    assert store.get("a") is not None  # a is now the most recently used
    store.put(response("c"), [])
    assert len(store) == 2 and store.get("b") is None
    assert store.get("a") is not None and store.get("c") is not None


def test_off_keeps_nothing() -> None:
    store = ResponseStore(enabled=False)
    store.put(response("a"), [])
    assert len(store) == 0 and store.get("a") is None


@pytest.mark.parametrize(
    ("env", "enabled"),
    [
        ({}, False),
        ({"VLLM_ENABLE_RESPONSES_API_STORE": "1"}, True),
        ({"ACTORLLM_ENABLE_RESPONSES_API_STORE": "true"}, True),
        (
            {"ACTORLLM_ENABLE_RESPONSES_API_STORE": "0", "VLLM_ENABLE_RESPONSES_API_STORE": "1"},
            False,
        ),
    ],
)
def test_switched_on_as_vllm(env: dict[str, str], enabled: bool) -> None:
    store = ResponseStore.from_env(env)
    assert store.enabled is enabled and store.max_size == MAX_STORED


def test_the_bound_from_the_environment() -> None:
    assert ResponseStore.from_env({"ACTORLLM_RESPONSES_API_STORE_MAX": "5"}).max_size == 5
    with pytest.raises(ValueError, match="ACTORLLM_RESPONSES_API_STORE_MAX"):
        ResponseStore.from_env({"ACTORLLM_RESPONSES_API_STORE_MAX": "many"})
    with pytest.raises(ValueError, match="at least 1"):
        ResponseStore.from_env({"ACTORLLM_RESPONSES_API_STORE_MAX": "0"})


def call(index: int, name: str | None, args: str) -> DeltaMessage:
    fn = DeltaFunctionCall(name=name, arguments=args)
    cid = f"call_{index}" if name else None
    return DeltaMessage(tool_calls=[DeltaToolCall(index=index, id=cid, function=fn)])


def test_each_call_is_an_item_of_its_own() -> None:
    w = EventWriter()
    events = []
    for d in [
        DeltaMessage(reasoning_content="think"),
        DeltaMessage(content="Sure."),
        call(0, "f", '{"a":'),
        call(0, None, " 1}"),
        call(1, "g", "{}"),
    ]:
        events += w.feed(d, [])
    events += w.close()
    added = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
    done = [e["output_index"] for e in events if e["type"] == "response.output_item.done"]
    assert added == done == [0, 1, 2, 3]
    assert [type(o).__name__ for o in w.output] == [
        "ReasoningOutput",
        "OutputMessage",
        "FunctionCallOutput",
        "FunctionCallOutput",
    ]
    f, g = w.output[2], w.output[3]
    assert (f.name, f.arguments, f.call_id) == ("f", '{"a": 1}', "call_0")  # type: ignore[union-attr]
    assert (g.name, g.arguments, g.call_id) == ("g", "{}", "call_1")  # type: ignore[union-attr]
    args_done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [(e["name"], e["arguments"]) for e in args_done] == [("f", '{"a": 1}'), ("g", "{}")]
