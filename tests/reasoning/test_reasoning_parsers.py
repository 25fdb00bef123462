"""Reasoning parsers on their families' output shapes, whole and streamed."""

from __future__ import annotations

import pytest

from actorllm.reasoning import (
    ReasoningStreamer,
    UnknownReasoningParserError,
    get_reasoning_parser,
)

CASES = [
    # DeepSeek-R1: the template opened <think>, the output closes it.
    ("deepseek_r1", "Okay, 2+2 is 4.\n</think>\n\nThe answer is 4.", "Okay, 2+2 is 4.\n",
     "\n\nThe answer is 4."),
    ("deepseek_r1", "<think>\nhmm</think>4", "\nhmm", "4"),
    ("deepseek_r1", "still thinking, cut off", "still thinking, cut off", None),
    # Qwen3: thinking on, thinking off (no tags at all), and a prompt-opened block.
    ("qwen3", "<think>\nThe user wants JSON.\n</think>\n\n{\"a\": 1}", "\nThe user wants JSON.\n",
     "\n\n{\"a\": 1}"),
    ("qwen3", "{\"a\": 1}", None, "{\"a\": 1}"),
    ("granite", "Here is my thought process:\nAdd them.\nHere is my response:\n4",
     "\nAdd them.\n", "\n4"),
    ("granite", "Here's my thought process: x Here's my response: y", " x ", " y"),
    ("granite", "Just 4.", None, "Just 4."),
]  # fmt: skip


@pytest.mark.parametrize(("name", "text", "reasoning", "content"), CASES)
def test_extract(name: str, text: str, reasoning: str | None, content: str | None) -> None:
    assert get_reasoning_parser(name)().extract(text) == (reasoning, content)


@pytest.mark.parametrize("step", [1, 4])
@pytest.mark.parametrize(("name", "text", "reasoning", "content"), CASES)
def test_stream(name: str, text: str, reasoning: str | None, content: str | None,
                step: int) -> None:  # fmt: skip
    streamer = ReasoningStreamer(get_reasoning_parser(name)())
    r = c = ""
    seen_content = False
    cuts = [*range(step, len(text), step), len(text)]
    for i, cut in enumerate(cuts):
        d = streamer.update(text[:cut], final=i == len(cuts) - 1)
        if d.reasoning_content:
            assert not seen_content, "reasoning after the answer started"
            r += d.reasoning_content
        if d.content:
            seen_content = True
            c += d.content
    assert (r or None, c or None) == (reasoning, content)


def test_prompt_opened_block() -> None:
    qwen = get_reasoning_parser("qwen3")
    opened = "<|im_start|>assistant\n<think>\n"
    assert qwen().begin(opened).extract("plan</think>answer") == ("plan", "answer")
    closed = "<|im_start|>assistant\n<think>\n\n</think>\n\n"  # enable_thinking: false
    assert qwen().begin(closed).extract('{"a": 1}') == (None, '{"a": 1}')


def test_unknown() -> None:
    with pytest.raises(UnknownReasoningParserError, match="deepseek_r1"):
        get_reasoning_parser("nope")
