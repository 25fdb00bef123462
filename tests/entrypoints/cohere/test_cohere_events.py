"""Chat deltas -> the v2 stream's events (``cohere/events.py``) and a finished chat ->
Cohere's answer (``serving.response_of``), driven with plain calls: vLLM 0.32's rules (its
``test_serving_streaming.py`` and ``test_serving_conversion.py``)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from actorllm.entrypoints.cohere.events import EventWriter
from actorllm.entrypoints.cohere.outcome import finish_reason_of
from actorllm.entrypoints.cohere.serving import response_of
from actorllm.entrypoints.openai.protocol.chat_request import FunctionCall, ToolCall
from actorllm.entrypoints.openai.protocol.chat_response import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionResponse,
    ChatResponseMessage,
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
)
from actorllm.entrypoints.openai.protocol.logprobs import ChatLogProbs, ChatTokenLogprob
from actorllm.entrypoints.openai.protocol.usage import PromptTokensDetails, UsageInfo


def frag(finish: str | None = None, stop: int | str | None = None, **delta: Any) -> ChatChunkChoice:
    return ChatChunkChoice(
        index=0, delta=DeltaMessage(**delta), finish_reason=finish, stop_reason=stop
    )


def call(
    index: int, *, id: str | None = None, name: str | None = None, args: str | None = None
) -> DeltaToolCall:
    return DeltaToolCall(index=index, id=id, function=DeltaFunctionCall(name=name, arguments=args))


def run(writer: EventWriter, *fragments: ChatChunkChoice) -> list[dict[str, Any]]:
    events = [e for f in fragments for e in writer.feed(f)]
    return events + writer.end("chat-1", None)


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


@pytest.mark.parametrize(
    ("reason", "stop", "cohere"),
    [
        ("stop", None, "COMPLETE"),
        ("stop", 2, "COMPLETE"),  # a stop token id is not a stop sequence
        ("stop", "END", "STOP_SEQUENCE"),
        ("length", None, "MAX_TOKENS"),
        ("tool_calls", None, "TOOL_CALL"),
        ("error", None, "ERROR"),
        ("abort", None, "COMPLETE"),
        (None, None, "COMPLETE"),
    ],
)
def test_finish_reasons(reason: str | None, stop: int | str | None, cohere: str) -> None:
    assert finish_reason_of(reason, stop) == cohere


def test_thinking_then_text() -> None:
    events = run(
        EventWriter(),
        frag(reasoning_content="Hm"),
        frag(reasoning_content="m."),
        frag(content="Hi"),
        frag("stop", content="!"),
    )
    assert kinds(events) == [
        "content-start",
        "content-delta",
        "content-delta",
        "content-end",
        "content-start",
        "content-delta",
        "content-delta",
        "content-end",
        "message-end",
    ]
    assert events[0] == {
        "type": "content-start",
        "index": 0,
        "delta": {"message": {"content": {"type": "thinking", "thinking": ""}}},
    }
    assert events[1]["delta"] == {"message": {"content": {"thinking": "Hm"}}}
    assert [e["index"] for e in events[3:8]] == [0, 1, 1, 1, 1]  # content blocks count up
    assert events[-1] == {
        "type": "message-end",
        "id": "chat-1",
        "delta": {"finish_reason": "COMPLETE"},
    }


def test_text_then_tool_calls() -> None:
    events = run(
        EventWriter(),
        frag(content="Let me check."),
        frag(tool_calls=[call(0, id="c1", name="f", args='{"a"')]),
        frag(tool_calls=[call(0, args=": 1}")]),
        frag(tool_calls=[call(1, id="c2", name="g")]),
        frag("tool_calls"),
    )
    assert kinds(events) == [
        "content-start",
        "content-delta",
        "content-end",
        "tool-call-start",
        "tool-call-delta",
        "tool-call-end",
        "tool-call-start",
        "tool-call-end",
        "message-end",
    ]
    assert events[3] == {
        "type": "tool-call-start",
        "index": 0,
        "delta": {
            "message": {
                "tool_calls": {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "f", "arguments": '{"a"'},
                }
            }
        },
    }
    assert events[4]["delta"] == {"message": {"tool_calls": {"function": {"arguments": ": 1}"}}}}
    assert [e["index"] for e in events[5:8]] == [0, 1, 1]  # a call's index is its own
    assert events[-1]["delta"]["finish_reason"] == "TOOL_CALL"


def test_a_non_reasoning_model_streams_its_reasoning_as_the_plan() -> None:
    events = run(
        EventWriter(reasoning_model=False),
        frag(content="x"),
        frag(reasoning_content="Plan."),
        frag(tool_calls=[call(0, id="c1", name="f", args="{}")]),
    )
    assert kinds(events) == [
        "content-start",
        "content-delta",
        "content-end",  # the plan closes the open block
        "tool-plan-delta",
        "tool-call-start",
        "tool-call-end",
        "message-end",
    ]
    assert events[3] == {"type": "tool-plan-delta", "delta": {"message": {"tool_plan": "Plan."}}}


def test_message_end_carries_usage_and_the_stop_sequence() -> None:
    writer = EventWriter()
    writer.feed(frag("stop", "END", content="a"))
    usage = UsageInfo(
        prompt_tokens=7,
        completion_tokens=2,
        total_tokens=9,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=4),
    )
    *_, end = writer.end("chat-1", usage)
    tokens = {"input_tokens": 7.0, "output_tokens": 2.0}
    assert end["delta"] == {
        "finish_reason": "STOP_SEQUENCE",
        "usage": {"billed_units": tokens, "tokens": tokens, "cached_tokens": 4.0},
    }


def completion(
    *,
    content: str | None = None,
    reasoning: str | None = None,
    calls: int = 0,
    finish: str = "stop",
    logprobs: bool = False,
) -> ChatCompletionResponse:
    tool_calls = [
        ToolCall(id=f"c{i}", function=FunctionCall(name="f", arguments="{}")) for i in range(calls)
    ]
    lps = [ChatTokenLogprob(token=t, logprob=-0.5) for t in ("a", "b")]
    choice = ChatChoice(
        index=0,
        message=ChatResponseMessage(
            content=content, reasoning_content=reasoning, tool_calls=tool_calls
        ),
        finish_reason=finish,
        logprobs=ChatLogProbs(content=lps) if logprobs else None,
        token_ids=[11, 12] if logprobs else None,
    )
    usage = UsageInfo(prompt_tokens=5, completion_tokens=2, total_tokens=7)
    return ChatCompletionResponse(
        id="chatcmpl-1", created=0, model="m", choices=[choice], usage=usage
    )


def wire(chat: ChatCompletionResponse, reasoning_model: bool = True) -> Any:
    return msgspec.json.decode(msgspec.json.encode(response_of(chat, reasoning_model)))


def test_text_answer() -> None:
    out = wire(completion(content="hello"))
    tokens = {"input_tokens": 5.0, "output_tokens": 2.0}
    assert out == {
        "id": "chatcmpl-1",
        "finish_reason": "COMPLETE",
        "message": {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
        "usage": {"billed_units": tokens, "tokens": tokens},
    }


def test_an_empty_answer_has_no_content() -> None:
    assert wire(completion(finish="length"))["message"] == {"role": "assistant"}


def test_reasoning_and_tool_calls() -> None:
    chat = completion(reasoning="Think.", calls=1, finish="tool_calls")
    out = wire(chat)
    assert out["finish_reason"] == "TOOL_CALL"
    assert out["message"]["content"] == [{"type": "thinking", "thinking": "Think."}]
    assert out["message"]["tool_calls"] == [
        {"id": "c0", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    ]
    # an older Command model: the reasoning of a turn with calls is its plan
    plan = wire(chat, reasoning_model=False)["message"]
    assert plan["tool_plan"] == "Think." and "content" not in plan
    # without calls it stays a thinking block
    alone = wire(completion(reasoning="Think.", content="ok"), reasoning_model=False)["message"]
    assert [b["type"] for b in alone["content"]] == ["thinking", "text"]


def test_logprobs_items_carry_token_ids() -> None:
    out = wire(completion(content="ab", logprobs=True))
    assert out["logprobs"] == [
        {"text": "a", "token_ids": [11], "logprobs": [-0.5]},
        {"text": "b", "token_ids": [12], "logprobs": [-0.5]},
    ]


def test_logprobs_ride_on_the_content_deltas() -> None:
    def tokens(*pairs: tuple[str, int]) -> dict[str, Any]:
        lps = [ChatTokenLogprob(token=t, logprob=-1.0) for t, _ in pairs]
        return {"logprobs": ChatLogProbs(content=lps), "token_ids": [i for _, i in pairs]}

    writer = EventWriter()
    held = ChatChunkChoice(index=0, delta=DeltaMessage(), **tokens(("<", 1)))
    assert writer.feed(held) == []  # the parser held the token back: no event yet
    text = ChatChunkChoice(index=0, delta=DeltaMessage(content="<a"), **tokens(("a", 2)))
    start, delta = writer.feed(text)
    assert "logprobs" not in start
    assert delta["logprobs"] == {"text": "<a", "token_ids": [1, 2], "logprobs": [-1.0, -1.0]}
