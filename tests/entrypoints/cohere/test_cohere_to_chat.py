"""The Cohere v2 request -> chat request conversion (``cohere/to_chat.py``): vLLM 0.32's
rules (its ``test_serving_conversion.py``), as behaviours of our conversion."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from actorllm.entrypoints.cohere.protocol import CohereChatRequest, developer_as_system
from actorllm.entrypoints.cohere.to_chat import chat_request
from actorllm.entrypoints.openai.errors import APIError
from actorllm.entrypoints.openai.fields import decode_request
from actorllm.entrypoints.openai.protocol.chat_request import (
    AssistantMessage,
    SystemMessage,
    ToolMessage,
    UserMessage,
)

HI = [{"role": "user", "content": "hi"}]
WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object"}},
}


def req(**fields: Any) -> CohereChatRequest:
    body = developer_as_system({"model": "m", "messages": HI, **fields})
    return decode_request(msgspec.json.encode(body), CohereChatRequest)


def chat(**fields: Any) -> Any:
    return chat_request(req(**fields))


def test_sampling_fields_map_to_the_chat_fields() -> None:
    c = chat(
        max_tokens=16,
        stop_sequences=["END"],
        temperature=0.5,
        p=0.9,
        k=5,
        seed=3,
        frequency_penalty=0.5,
        presence_penalty=-0.5,
        priority=2,
    )
    assert (c.max_tokens, c.max_completion_tokens, c.stop) == (16, 16, ["END"])
    assert (c.temperature, c.top_p, c.top_k, c.seed) == (0.5, 0.9, 5, 3)
    assert (c.frequency_penalty, c.presence_penalty, c.priority) == (0.5, -0.5, 2)
    assert not c.stream and not c.logprobs and c.tools is None and c.tool_choice is None
    assert c.chat_template_kwargs is None and c.response_format is None


def test_logprobs_ask_for_token_ids_too() -> None:
    c = chat(logprobs=True)
    assert c.logprobs and c.return_token_ids


def test_stream_asks_for_usage_at_the_end() -> None:
    c = chat(stream=True)
    assert c.stream and c.stream_options is not None
    assert c.stream_options.include_usage and not c.stream_options.continuous_usage_stats


def test_system_user_and_developer_messages() -> None:
    c = chat(
        messages=[
            {"role": "developer", "content": "Dev."},
            {
                "role": "system",
                "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
            },
            {"role": "user", "content": [{"type": "text", "text": "one"}]},
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
        ]
    )
    assert c.messages[:3] == [
        SystemMessage(content="Dev."),
        SystemMessage(content="AB"),
        UserMessage(content="one"),  # a single text block is the text
    ]
    assert isinstance(c.messages[3], UserMessage) and len(c.messages[3].content) == 2


def test_assistant_thinking_plan_and_tool_calls() -> None:
    turn = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Think. "},
            {"type": "text", "text": "Calling."},
        ],
        "tool_plan": "Plan.",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},
            {"id": "c2", "type": "function", "function": {"name": "g"}},
        ],
    }
    [_, a] = chat(messages=[*HI, turn]).messages
    assert isinstance(a, AssistantMessage)
    assert a.content == "Calling." and a.reasoning == "Think. Plan."
    assert a.tool_calls is not None
    assert [(t.id, t.function.name, t.function.arguments) for t in a.tool_calls] == [
        ("c1", "f", '{"a": 1}'),
        ("c2", "g", "{}"),  # missing arguments: an empty object
    ]


def test_tool_messages_text_and_documents() -> None:
    doc = {"type": "document", "document": {"data": {"text": "doc"}, "id": "d1"}}
    bare = {"type": "document", "document": {"data": {"k": 1}}}
    c = chat(
        messages=[
            *HI,
            {"role": "tool", "tool_call_id": "c1", "content": "plain"},
            {
                "role": "tool",
                "tool_call_id": "c2",
                "content": [{"type": "text", "text": "t"}, doc, bare],
            },
        ]
    )
    assert c.messages[1] == ToolMessage(content="plain", tool_call_id="c1")
    parts = c.messages[2].content
    assert [p.text for p in parts[:1]] == ["t"]
    assert json.loads(parts[1].text) == {"data": {"text": "doc"}, "id": "d1"}
    assert json.loads(parts[2].text) == {"data": {"k": 1}}  # no id: none written


def test_response_format() -> None:
    def fmt(rf: dict[str, Any]) -> Any:
        return msgspec.to_builtins(chat(response_format=rf).response_format)

    assert fmt({"type": "text"}) is None
    assert fmt({"type": "json_object"}) == {"type": "json_object"}
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    rf = fmt({"type": "json_object", "json_schema": schema})
    assert rf["type"] == "json_schema"
    assert (rf["json_schema"]["name"], rf["json_schema"]["schema"]) == (
        "cohere_v2_json_schema",
        schema,
    )


def test_tools_and_tool_choice() -> None:
    c = chat(tools=[WEATHER])
    assert c.tool_choice == "auto"  # Cohere's free choice
    assert c.tools[0].function.name == "get_weather" and c.tools[0].function.strict is None
    assert chat(tools=[WEATHER], strict_tools=True).tools[0].function.strict is True
    assert chat(tools=[WEATHER], tool_choice="REQUIRED").tool_choice == "required"
    assert chat(tools=[WEATHER], tool_choice="NONE").tool_choice == "none"
    with pytest.raises(msgspec.ValidationError):
        req(tool_choice="ANY")


def test_documents_and_options_for_the_template() -> None:
    c = chat(
        documents=["plain", {"id": "x", "data": {"title": "T"}}, {"data": {"a": "b"}}],
        safety_mode="CONTEXTUAL",
        citation_options={"mode": "FAST"},
        thinking={"type": "enabled", "token_budget": 100},
        chat_template_kwargs={"safety_mode": "mine", "other": 1},
    )
    assert c.documents == [
        {"id": "doc_0", "data": {"text": "plain"}},
        {"id": "x", "data": {"title": "T"}},
        {"id": "doc_2", "data": {"a": "b"}},
    ]
    assert c.chat_template_kwargs == {
        "safety_mode": "mine",  # the request's own kwargs win
        "other": 1,
        "citation_options": {"mode": "FAST"},
        "thinking": {"type": "enabled", "token_budget": 100},
    }
    assert chat(safety_mode="STRICT").chat_template_kwargs == {"safety_mode": "strict"}


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:x"}}]}],
            "messages[0].content (image_url)",
        ),
        (
            [*HI, {"role": "assistant", "content": "a", "citations": [{"start": 0, "end": 1}]}],
            "messages[1].citations",
        ),
    ],
)
def test_refused_by_name(messages: list[dict[str, Any]], param: str) -> None:
    with pytest.raises(APIError) as info:
        chat(messages=messages)
    assert info.value.status == 400 and f"`{param}`" in info.value.message


@pytest.mark.parametrize(
    "fields",
    [
        {"messages": []},
        {"model": ""},
        {"max_tokens": -1},
        {"stop_sequences": ["a", "b", "c", "d", "e"]},  # vLLM's VLLM_MAX_STOP_STRINGS
        {"messages": [{"role": "robot", "content": "x"}]},
    ],
)
def test_bodies_that_do_not_decode(fields: dict[str, Any]) -> None:
    with pytest.raises(msgspec.ValidationError):
        req(**fields)


def test_vllm_extensions_this_server_lacks_are_refused() -> None:
    with pytest.raises(APIError) as info:
        req(kv_transfer_params={"do_remote_prefill": True})
    assert info.value.param == "kv_transfer_params"


@pytest.mark.parametrize("value", [None, True, False])
def test_watermarking_is_passed_on(value: bool | None) -> None:
    """vLLM's test_watermarking_reaches_sampling_params: as given, resolved by the engine."""
    assert chat(watermarking=value).watermarking is value
