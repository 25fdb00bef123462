"""Reasoning parsers on their families' output shapes, whole and streamed."""

from __future__ import annotations

from typing import Any

import pytest

from actorllm.reasoning import (
    REASONING_PARSERS,
    ReasoningParser,
    ReasoningStreamer,
    UnknownReasoningParserError,
    get_reasoning_parser,
)

OFF = {"enable_thinking": False}

# (parser, effective chat_template_kwargs, output, reasoning, content)
CASES = [
    # DeepSeek-R1: the template opened <think>, the output closes it.
    ("deepseek_r1", {}, "Okay, 2+2 is 4.\n</think>\n\nThe answer is 4.", "Okay, 2+2 is 4.\n",
     "\n\nThe answer is 4."),
    ("deepseek_r1", {}, "<think>\nhmm</think>4", "\nhmm", "4"),
    ("deepseek_r1", {}, "still thinking, cut off", "still thinking, cut off", None),
    # Qwen3 (vLLM 0.32): enable_thinking (default on) starts the output inside the
    # reasoning, whether or not it writes <think>; off: all answer.
    ("qwen3", {}, "<think>\nThe user wants JSON.\n</think>\n\n{\"a\": 1}",
     "\nThe user wants JSON.\n", "\n\n{\"a\": 1}"),
    ("qwen3", {}, "plan</think>answer", "plan", "answer"),
    ("qwen3", {}, "{\"a\": 1}", "{\"a\": 1}", None),
    ("qwen3", {"enable_thinking": True}, "<think>cut off", "cut off", None),
    ("qwen3", {}, "Call it.\n<tool_call>\n{}\n</tool_call>", "Call it.\n",
     "<tool_call>\n{}\n</tool_call>"),
    ("qwen3", {}, "<think>a<think>b</think>c</think>d", "ab", "cd"),
    ("qwen3", {}, "  <think>x</think>y", "  x", "y"),
    ("qwen3", OFF, "{\"a\": 1}", None, "{\"a\": 1}"),
    ("qwen3", OFF, "<think>x</think>y", None, "<think>x</think>y"),
    ("granite", {}, "Here is my thought process:\nAdd them.\nHere is my response:\n4",
     "\nAdd them.\n", "\n4"),
    ("granite", {}, "Here's my thought process: x Here's my response: y", " x ", " y"),
    ("granite", {}, "Just 4.", None, "Just 4."),
    # GLM-4.5 (vLLM 0.32's glm47_moe): as qwen3; thinking or enable_thinking switch it,
    # and the reasoning's trailing whitespace is dropped.
    ("glm45", {}, "<think>The user greets me.\n</think>\nHello!", "The user greets me.",
     "\nHello!"),
    ("glm45", {}, "Hello!", "Hello!", None),
    ("glm45", {"thinking": False}, "Hello!", None, "Hello!"),
    ("glm45", {"thinking": False, "enable_thinking": True}, "a</think>b", "a", "b"),
    # Step3 and MiniMax-M2: the template opened <think>; reasoning up to </think>
    # (MiniMax-M2's grammar as glm45's: trailing whitespace dropped).
    ("step3", {}, "Two and two.\n</think>\n4", "Two and two.\n", "\n4"),
    ("step3", {}, "<think>a</think>b", "<think>a", "b"),  # (vLLM's step3 keeps it)
    ("minimax_m2", {}, "The user asks.\n</think>\n\nHello!", "The user asks.", "\n\nHello!"),
    ("minimax_m2", {"enable_thinking": False}, "x</think>y</think>z", "x", "yz"),
    ("minimax_m2", {}, "Call.<minimax:tool_call>", "Call.", "<minimax:tool_call>"),
    ("minimax_m2", {}, "cut off", "cut off", None),
    # MiniMax-M2, append-think: no split, the opened <think> goes back in front.
    ("minimax_m2_append_think", {}, "Hm.\n</think>\n\nHi!", None,
     "<think>Hm.\n</think>\n\nHi!"),
    # ERNIE-4.5 thinking: the answer may be wrapped in <response>.
    ("ernie45", {}, "abc\n</think>\n\n<response>\ndef\n</response>\n", "abc\n", "\ndef\n"),
    ("ernie45", {}, "abc\n</think>\ndef", "abc\n", "\ndef"),
    # Seed-OSS: as qwen3, with its own tags.
    ("seed_oss", {}, "<seed:think>Got it.</seed:think>Answer", "Got it.", "Answer"),
    ("seed_oss", {}, "Got it.</seed:think>Answer", "Got it.", "Answer"),
    ("seed_oss", {}, "cut off", "cut off", None),
    ("seed_oss", OFF, "Answer", None, "Answer"),
    # DeepSeek-V3.1: thinking (or enable_thinking) on: as deepseek_r1; default off.
    ("deepseek_v3", {"thinking": True}, "Greet back.</think>Hello!", "Greet back.", "Hello!"),
    ("deepseek_v3", {"enable_thinking": True}, "cut off", "cut off", None),
    ("deepseek_v3", {}, "Hello!", None, "Hello!"),
    # Magistral: [THINK]...[/THINK] special tokens, kept in the text.
    ("mistral", {}, "[THINK]Compute 2+2.[/THINK]The answer is 4.", "Compute 2+2.",
     "The answer is 4."),
    ("mistral", {}, "The answer is 4.", None, "The answer is 4."),
    ("mistral", {}, "[THINK]cut off", "cut off", None),
    # Olmo 3: plain-text tags; the template may open the block.
    ("olmo3", {}, "<think>Plan it.</think>Answer", "Plan it.", "Answer"),
    ("olmo3", {}, "Plan it.</think>\n\nAnswer", "Plan it.", "\n\nAnswer"),
]  # fmt: skip


def _parser(name: str, kwargs: dict[str, Any]) -> ReasoningParser:
    return get_reasoning_parser(name)(chat_template_kwargs=kwargs)


@pytest.mark.parametrize(("name", "kwargs", "text", "reasoning", "content"), CASES)
def test_extract(name: str, kwargs: dict[str, Any], text: str, reasoning: str | None,
                 content: str | None) -> None:  # fmt: skip
    assert _parser(name, kwargs).extract(text) == (reasoning, content)


@pytest.mark.parametrize("step", [1, 4])
@pytest.mark.parametrize(("name", "kwargs", "text", "reasoning", "content"), CASES)
def test_stream(name: str, kwargs: dict[str, Any], text: str, reasoning: str | None,
                content: str | None, step: int) -> None:  # fmt: skip
    streamer = ReasoningStreamer(_parser(name, kwargs))
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


def test_thinking_comes_from_the_kwargs_not_the_prompt() -> None:
    """vLLM 0.32 decides from the effective chat_template_kwargs alone: None where the
    output's own marker opens the reasoning (mistral), a fixed True where the template
    always opens it."""
    thinking = {n: p.thinking_of({}) for n, p in REASONING_PARSERS.items()}
    assert thinking == {
        "deepseek_r1": True, "deepseek_v3": False, "ernie45": True, "glm45": True,
        "granite": None, "minimax_m2": True, "minimax_m2_append_think": True,
        "mistral": None, "openai_gptoss": None, "olmo3": None, "qwen3": True,
        "seed_oss": True, "step3": True,
    }  # fmt: skip
    assert get_reasoning_parser("qwen3").thinking_of(OFF) is False
    assert get_reasoning_parser("deepseek_v3").thinking_of({"thinking": True}) is True
    assert get_reasoning_parser("glm45").thinking_of({"enable_thinking": False}) is False


def test_unknown() -> None:
    with pytest.raises(UnknownReasoningParserError, match="deepseek_r1"):
        get_reasoning_parser("nope")


def test_only_special_token_markers_keep_special_tokens() -> None:
    keep = {n for n, p in REASONING_PARSERS.items() if p.keeps_special_tokens}
    assert keep == {"mistral", "openai_gptoss"}  # [THINK]; harmony's channels


# vLLM 0.11's --reasoning-parser names: those taken here, and those refused by name.
VLLM_TAKEN = [
    "deepseek_r1",
    "deepseek_v3",
    "ernie45",
    "glm45",
    "granite",
    "minimax_m2",
    "minimax_m2_append_think",
    "mistral",
    "olmo3",
    "openai_gptoss",
    "qwen3",
    "seed_oss",
    "step3",
]
VLLM_REFUSED = ["gpt_oss", "hunyuan_a13b", "kimi_k2"]  # fmt: skip


def test_vllm_launch_lines_config() -> None:
    from actorllm.engine.config.engine_config import EngineConfig, EngineConfigError

    for name in VLLM_TAKEN:
        assert EngineConfig(reasoning_parser=name).reasoning_parser == name
    for name in VLLM_REFUSED:
        with pytest.raises(EngineConfigError, match="reasoning_parser"):
            EngineConfig(reasoning_parser=name)
