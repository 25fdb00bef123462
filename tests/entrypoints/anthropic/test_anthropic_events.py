"""Chat deltas -> the Messages stream's events (``anthropic/events.py``), by plain calls."""

from __future__ import annotations

from typing import Any

import pytest

from actorllm.entrypoints.anthropic.events import BlockWriter, stop_reason_of
from actorllm.entrypoints.openai.protocol.chat_response import (
    ChatChunkChoice,
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
)


def frag(
    content: str | None = None,
    reasoning: str | None = None,
    calls: list[DeltaToolCall] | None = None,
    finish: str | None = None,
    stop: int | str | None = None,
) -> ChatChunkChoice:
    delta = DeltaMessage(content=content, reasoning_content=reasoning, tool_calls=calls)
    return ChatChunkChoice(index=0, delta=delta, finish_reason=finish, stop_reason=stop)


def call(args: str, id: str | None = None, name: str | None = None) -> DeltaToolCall:
    return DeltaToolCall(index=0, id=id, function=DeltaFunctionCall(name=name, arguments=args))


def run(*fragments: ChatChunkChoice) -> tuple[list[dict[str, Any]], BlockWriter]:
    w = BlockWriter()
    events = [e for f in fragments for e in w.feed(f)]
    return events + w.close(), w


def test_thinking_then_text_blocks() -> None:
    events, w = run(frag(reasoning="hm"), frag(content="Hi"), frag(content="!", finish="stop"))
    kinds = [(e["type"], e.get("delta", {}).get("type")) for e in events]
    assert kinds == [
        ("content_block_start", None),
        ("content_block_delta", "thinking_delta"),
        ("content_block_delta", "signature_delta"),  # before the thinking block stops
        ("content_block_stop", None),
        ("content_block_start", None),
        ("content_block_delta", "text_delta"),
        ("content_block_delta", "text_delta"),
        ("content_block_stop", None),
    ]
    assert events[0] == {
        "type": "content_block_start",
        "content_block": {"type": "thinking", "thinking": ""},
        "index": 0,
    }
    assert [e["index"] for e in events] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert w.stop() == ("end_turn", None)


def test_text_inside_a_tool_call_comes_after_it() -> None:
    """vLLM's regression: arguments and trailing text in one delta lose neither."""
    events, w = run(
        frag(calls=[call("", id="c1", name="read_file")]),
        frag(calls=[call('{"path":"/tmp/f"')]),
        frag(content="\nOkay", calls=[call("}")], finish="tool_calls"),
    )
    args = "".join(
        e["delta"]["partial_json"] for e in events if e.get("delta", {}).get("partial_json")
    )
    assert args == '{"path":"/tmp/f"}'
    starts = [(e["content_block"]["type"], e["index"]) for e in events if "content_block" in e]
    assert starts == [("tool_use", 0), ("text", 1)]
    assert events[0]["content_block"] == {
        "type": "tool_use",
        "id": "c1",
        "name": "read_file",
        "input": {},
    }
    texts = [e["delta"]["text"] for e in events if e.get("delta", {}).get("type") == "text_delta"]
    assert texts == ["\nOkay"]
    assert w.stop() == ("tool_use", None)


def test_a_stop_string_is_the_stop_sequence() -> None:
    _, w = run(frag(content="a"), frag(finish="stop", stop="END"))
    assert w.stop() == ("stop_sequence", "END")


@pytest.mark.parametrize(
    ("finish", "stop", "used", "complete", "expected"),
    [
        ("length", None, True, True, ("max_tokens", None)),
        ("stop", None, False, False, ("end_turn", None)),
        ("stop", 7, False, False, ("end_turn", None)),  # a stop token id is no sequence
        ("stop", "###", False, False, ("stop_sequence", "###")),
        ("stop", "###", True, True, ("tool_use", None)),  # complete calls win
        ("stop", "###", True, False, ("stop_sequence", "###")),  # a cut call must not run
        ("tool_calls", None, True, False, ("tool_use", None)),
        ("stop", None, True, False, ("tool_use", None)),  # a forced (named) call
        ("abort", None, False, False, (None, None)),
    ],
)
def test_stop_reason_table(
    finish: str, stop: int | str | None, used: bool, complete: bool, expected: tuple[Any, Any]
) -> None:
    assert stop_reason_of(finish, stop, tool_used=used, tool_complete=complete) == expected
