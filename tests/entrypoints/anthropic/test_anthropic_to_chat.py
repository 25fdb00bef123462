"""The Messages request -> chat request conversion (``anthropic/to_chat.py``): vLLM 0.32's
rules (its ``test_anthropic_messages_conversion.py``), as behaviours of our conversion."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from actorllm.entrypoints.anthropic.protocol import (
    AnthropicCountTokensRequest,
    AnthropicMessagesRequest,
)
from actorllm.entrypoints.anthropic.to_chat import Conversion, chat_request, count_request
from actorllm.entrypoints.openai.errors import APIError
from actorllm.entrypoints.openai.fields import decode_request
from actorllm.entrypoints.openai.protocol.chat_request import (
    AssistantMessage,
    NamedToolChoice,
    SystemMessage,
    ToolMessage,
    UserMessage,
)

WEATHER = {
    "name": "get_weather",
    "description": "The weather.",
    "input_schema": {"properties": {"city": {"type": "string"}}},
}


def req(**fields: Any) -> AnthropicMessagesRequest:
    body = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    return decode_request(msgspec.json.encode({**body, **fields}), AnthropicMessagesRequest)


def chat(conv: Conversion = Conversion(), **fields: Any) -> Any:
    return chat_request(req(**fields), conv)


def test_sampling_fields_map_to_the_chat_fields() -> None:
    c = chat(stop_sequences=["x"], temperature=0.5, top_p=0.9, top_k=5, cache_salt="s")
    assert (c.max_tokens, c.max_completion_tokens, c.stop) == (16, 16, ["x"])
    assert (c.temperature, c.top_p, c.top_k, c.cache_salt) == (0.5, 0.9, 5, "s")
    assert not c.stream and c.tools is None and c.tool_choice is None


def test_stream_asks_for_usage_on_every_chunk() -> None:
    c = chat(stream=True)
    assert c.stream and c.stream_options is not None
    assert c.stream_options.include_usage and c.stream_options.continuous_usage_stats


def test_system_string_and_blocks_drop_the_billing_header() -> None:
    assert chat(system="Be brief.").messages[0] == SystemMessage(content="Be brief.")
    blocks = [
        {"type": "text", "text": "x-anthropic-billing-header: cc=1;"},
        {"type": "text", "text": "A"},
        {"type": "text", "text": "B"},
    ]
    assert chat(system=blocks).messages[0] == SystemMessage(content="AB")


def test_inline_system_messages_stay_or_merge() -> None:
    messages = [
        {"role": "user", "content": "q1"},
        {"role": "system", "content": "reminder"},
        {"role": "user", "content": "q2"},
    ]
    kept = chat(system="S", messages=messages).messages
    assert [type(m).__name__ for m in kept] == [
        "SystemMessage",
        "UserMessage",
        "SystemMessage",
        "UserMessage",
    ]
    merged = chat(Conversion(merge_inline_system=True), system="S", messages=messages).messages
    assert merged[0] == SystemMessage(content="Sreminder")
    assert [type(m).__name__ for m in merged[1:]] == ["UserMessage", "UserMessage"]


def test_tool_use_and_result_round_trip() -> None:
    messages = [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Need ", "signature": "s"},
                {"type": "thinking", "thinking": "it."},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "P"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "sunny"}, {"type": "text", "text": "20C"}],
                },
                {"type": "text", "text": "thanks"},
            ],
        },
    ]
    m = chat(messages=messages, tools=[WEATHER]).messages
    assistant = m[1]
    assert isinstance(assistant, AssistantMessage)
    assert assistant.content == "Checking." and assistant.reasoning == "Need it."
    assert assistant.tool_calls is not None
    call = assistant.tool_calls[0]
    assert (call.id, call.function.name, call.function.arguments) == (
        "t1",
        "get_weather",
        '{"city": "P"}',
    )
    # the tool message comes before the rest of that user turn
    assert m[2] == ToolMessage(content="sunny\n20C", tool_call_id="t1")
    assert m[3] == UserMessage(content="thanks")


def test_a_user_turn_of_only_tool_results_is_the_tool_messages() -> None:
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}
    m = chat(messages=[{"role": "user", "content": [result]}]).messages
    assert m == [ToolMessage(content="ok", tool_call_id="t1")]


def test_tools_and_tool_choice() -> None:
    c = chat(tools=[WEATHER])
    assert c.tool_choice == "auto" and c.parallel_tool_calls is None
    assert c.tools is not None
    fn = c.tools[0].function
    assert fn.name == "get_weather" and fn.description == "The weather."
    assert fn.parameters == {"type": "object", "properties": {"city": {"type": "string"}}}
    assert chat(tools=[WEATHER], tool_choice={"type": "any"}).tool_choice == "required"
    assert chat(tools=[WEATHER], tool_choice={"type": "none"}).tool_choice == "none"
    named = chat(
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
    )
    assert isinstance(named.tool_choice, NamedToolChoice)
    assert named.tool_choice.function.name == "get_weather"
    assert named.parallel_tool_calls is False


def test_tool_changes_resolve_the_tools_in_effect() -> None:
    other = {"name": "other", "input_schema": {"type": "object"}}
    messages = [
        {
            "role": "system",
            "content": [
                {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "get_weather"}},
                {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": other}},
            ],
        },
        {"role": "user", "content": "hi"},
    ]
    c = chat(tools=[WEATHER], messages=messages)
    assert [t.function.name for t in c.tools] == ["other"]
    unknown = [
        {
            "role": "system",
            "content": [
                {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "nope"}},
            ],
        },
        {"role": "user", "content": "hi"},
    ]
    with pytest.raises(APIError, match="not declared in tools"):
        chat(messages=unknown)


def test_output_config_and_thinking() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    c = chat(output_config={"effort": "high", "format": {"type": "json_schema", "schema": schema}})
    assert c.reasoning_effort == "high"
    fmt = msgspec.to_builtins(c.response_format)
    assert fmt["type"] == "json_schema"
    assert (fmt["json_schema"]["name"], fmt["json_schema"]["schema"]) == ("json_schema", schema)
    off = Conversion(disabled_thinking_effort="low")
    assert chat(off, thinking={"type": "disabled"}).reasoning_effort == "low"
    assert chat(thinking={"type": "disabled"}).reasoning_effort == "none"
    enabled = {"type": "enabled", "budget_tokens": 2000}
    assert chat(max_tokens=4000, thinking=enabled).thinking_token_budget == 2000
    assert chat(thinking={"type": "adaptive"}).thinking_token_budget is None
    assert chat(
        thinking={"type": "adaptive"}, output_config={"effort": "max"}
    ).reasoning_effort == ("max")


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        (
            {"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
            "messages",
        ),
        ({"tools": [{**WEATHER, "defer_loading": True}]}, "tools"),
    ],
)
def test_what_the_chat_path_cannot_serve_is_refused_by_name(
    fields: dict[str, Any], param: str
) -> None:
    with pytest.raises(APIError) as e:
        chat(**fields)
    assert e.value.status == 400 and e.value.param == param


@pytest.mark.parametrize(
    "fields",
    [
        {"max_tokens": 0},
        {"thinking": {"type": "enabled", "budget_tokens": 1000}},  # under 1024
        {"max_tokens": 2000, "thinking": {"type": "enabled", "budget_tokens": 2000}},
        {"stop_sequences": ["a", "b", "c", "d", "e"]},  # vLLM's VLLM_MAX_STOP_STRINGS
        {"tool_choice": {"type": "tool"}},  # no name
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "x"}}
                    ],
                }
            ]
        },  # not in a system message
    ],
)
def test_invalid_bodies_do_not_decode(fields: dict[str, Any]) -> None:
    with pytest.raises(msgspec.ValidationError):
        req(**fields)


def test_count_request_carries_no_sampling_and_no_budget_check() -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [WEATHER],
        "thinking": {"type": "enabled", "budget_tokens": 2048},
    }
    c = count_request(
        decode_request(msgspec.json.encode(body), AnthropicCountTokensRequest), Conversion()
    )
    assert c.max_tokens is None and c.tool_choice == "auto" and c.tools is not None


@pytest.mark.parametrize("value", [None, True, False])
def test_watermarking_is_passed_on(value: bool | None) -> None:
    """vLLM's TestWatermarking: as given, resolved by the engine."""
    assert chat(watermarking=value).watermarking is value
