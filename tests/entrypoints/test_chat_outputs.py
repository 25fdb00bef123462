"""A choice's text -> reasoning, content and tool calls, whole and streamed."""

from __future__ import annotations

import json

import pytest

from actorllm.entrypoints.openai.chat_outputs import ChoiceParser
from actorllm.entrypoints.openai.tool_parsers import HermesToolParser, NamedToolParser
from actorllm.reasoning import Qwen3ReasoningParser

TEXT = (
    "<think>\nThe user wants weather.\n</think>\n\nChecking.<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
)


def test_message() -> None:
    m = ChoiceParser(Qwen3ReasoningParser(), HermesToolParser()).message(TEXT)
    assert m.reasoning_content == "\nThe user wants weather.\n"
    assert m.content == "\n\nChecking."
    assert [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    plain = ChoiceParser().message("hello")
    assert (plain.content, plain.reasoning_content, plain.tool_calls) == ("hello", None, [])
    named = ChoiceParser(tools=NamedToolParser("f")).message('{"x": 1}')
    assert named.content is None and named.tool_calls[0].function.arguments == '{"x": 1}'


@pytest.mark.parametrize("streamed", [False, True])
def test_a_tool_call_ends_qwen3s_reasoning(streamed: bool) -> None:
    """vLLM 0.32's qwen3: thinking on, a <tool_call> ends the reasoning without </think>,
    and the call is read from the answer it starts."""
    text = 'Call it.\n<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
    p = ChoiceParser(Qwen3ReasoningParser(), HermesToolParser())
    if not streamed:
        m = p.message(text)
        reasoning, calls = m.reasoning_content, [(c.function.name, c.function.arguments)
                                                 for c in m.tool_calls]  # fmt: skip
    else:
        reasoning, calls = "", []
        for cut in range(1, len(text) + 1):
            d = p.delta(text[:cut], final=cut == len(text))
            reasoning += d.reasoning_content or ""
            for c in d.tool_calls:
                assert c.function is not None
                if c.function.name:
                    calls.append((c.function.name, ""))
                calls[-1] = (calls[-1][0], calls[-1][1] + (c.function.arguments or ""))
    assert reasoning == "Call it.\n"
    assert [(n, json.loads(a)) for n, a in calls] == [("f", {"a": 1})]


@pytest.mark.parametrize("step", [1, 5])
def test_stream_matches_message(step: int) -> None:
    p = ChoiceParser(Qwen3ReasoningParser(), HermesToolParser())
    reasoning = content = args = ""
    names = []
    cuts = [*range(step, len(TEXT), step), len(TEXT)]
    for i, cut in enumerate(cuts):
        d = p.delta(TEXT[:cut], final=i == len(cuts) - 1)
        reasoning += d.reasoning_content or ""
        content += d.content or ""
        for tc in d.tool_calls:
            if tc.function and tc.function.name:
                names.append(tc.function.name)
            args += (tc.function.arguments or "") if tc.function else ""
    assert reasoning == "\nThe user wants weather.\n"
    assert content == "\n\nChecking."
    assert names == ["get_weather"] and json.loads(args) == {"city": "Paris"}
    assert p.tools_called


def test_a_named_call_starts_after_the_reasoning() -> None:
    """A forced named call opens with its arguments' first character: a stream that starts
    with a bare "<think>" gets its reasoning first, then the call (once), as vLLM's."""
    p = ChoiceParser(Qwen3ReasoningParser(), NamedToolParser("f"))
    text = '<think>abc</think>{"x": 1}'
    kinds = []
    for cut in range(1, len(text) + 1):
        d = p.delta(text[:cut], final=cut == len(text))
        kinds += ["R"] * bool(d.reasoning_content) + [
            "N" if tc.function and tc.function.name else "A" for tc in d.tool_calls
        ]
    assert kinds[0] == "R" and kinds.index("N") > kinds.index("R")
    assert kinds.count("N") == 1 and "R" not in kinds[kinds.index("N") :]
    ended_in_reasoning = ChoiceParser(Qwen3ReasoningParser(), NamedToolParser("f"))
    assert not ended_in_reasoning.delta("<think>", final=False).tool_calls
    assert not ended_in_reasoning.message("<think>abc").tool_calls


def test_stream_without_parsers_passes_text_through() -> None:
    p = ChoiceParser()
    assert p.delta("he").content == "he"
    assert p.delta("hello").content == "llo"
    assert p.delta("hello", final=True).empty


def test_parallel_tool_calls_false_keeps_the_first_call() -> None:
    text = (
        '<tool_call>{"name": "a", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "b", "arguments": {"x": 1}}</tool_call>'
    )
    m = ChoiceParser(tools=HermesToolParser(), single_call=True).message(text)
    assert [c.function.name for c in m.tool_calls] == ["a"]
    assert len(ChoiceParser(tools=HermesToolParser()).message(text).tool_calls) == 2
    p = ChoiceParser(tools=HermesToolParser(), single_call=True)
    streamed = [d for cut in range(1, len(text) + 1)
                for d in p.delta(text[:cut], final=cut == len(text)).tool_calls]  # fmt: skip
    assert streamed and {d.index for d in streamed} == {0}


def test_reasoning_goes_out_under_both_names() -> None:
    """vLLM renamed reasoning_content to reasoning; clients of either version find it."""
    import msgspec

    from actorllm.entrypoints.openai.protocol import ChatResponseMessage, DeltaMessage

    body = msgspec.json.decode(msgspec.json.encode(ChatResponseMessage(reasoning_content="r")))
    assert body["reasoning_content"] == body["reasoning"] == "r"
    assert msgspec.to_builtins(DeltaMessage(reasoning_content="r")) == {
        "reasoning_content": "r", "reasoning": "r",
    }  # fmt: skip
    assert msgspec.to_builtins(DeltaMessage(content="c")) == {"content": "c"}
