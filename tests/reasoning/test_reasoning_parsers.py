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
    # GLM-4.5: as qwen3 (enable_thinking false closes an empty block in the prompt).
    ("glm45", "<think>The user greets me.</think>\nHello!", "The user greets me.", "\nHello!"),
    ("glm45", "Hello!", None, "Hello!"),
    # Step3 and MiniMax-M2: the template opened <think>; reasoning up to </think>.
    ("step3", "Two and two.\n</think>\n4", "Two and two.\n", "\n4"),
    ("minimax_m2", "The user asks.\n</think>\n\nHello!", "The user asks.\n", "\n\nHello!"),
    ("minimax_m2", "cut off", "cut off", None),
    # MiniMax-M2, append-think: no split, the opened <think> goes back in front.
    ("minimax_m2_append_think", "Hm.\n</think>\n\nHi!", None, "<think>Hm.\n</think>\n\nHi!"),
    # ERNIE-4.5 thinking: the answer may be wrapped in <response>.
    ("ernie45", "abc\n</think>\n\n<response>\ndef\n</response>\n", "abc\n", "\ndef\n"),
    ("ernie45", "abc\n</think>\ndef", "abc\n", "\ndef"),
    # Seed-OSS.
    ("seed_oss", "<seed:think>Got it.</seed:think>Answer", "Got it.", "Answer"),
    ("seed_oss", "Got it.</seed:think>Answer", "Got it.", "Answer"),
    # Magistral: [THINK]...[/THINK] special tokens, kept in the text.
    ("mistral", "[THINK]Compute 2+2.[/THINK]The answer is 4.", "Compute 2+2.",
     "The answer is 4."),
    ("mistral", "The answer is 4.", None, "The answer is 4."),
    ("mistral", "[THINK]cut off", "cut off", None),
    # Olmo 3: plain-text tags; the template may open the block.
    ("olmo3", "<think>Plan it.</think>Answer", "Plan it.", "Answer"),
    ("olmo3", "Plan it.</think>\n\nAnswer", "Plan it.", "\n\nAnswer"),
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


def test_deepseek_v3_follows_the_thinking_switch() -> None:
    """DeepSeek-V3.1's template opens <think> with thinking on and closes it with thinking
    off: reasoning only in the first case (vLLM: the R1 parser or the identity one)."""
    v3 = get_reasoning_parser("deepseek_v3")
    on = "<｜User｜>hi<｜Assistant｜><think>"
    assert v3().begin(on).extract("Greet back.</think>Hello!") == ("Greet back.", "Hello!")
    off = "<｜User｜>hi<｜Assistant｜></think>"
    assert v3().begin(off).extract("Hello!") == (None, "Hello!")
    assert v3().extract("Hello!") == (None, "Hello!")


def test_only_special_token_markers_keep_special_tokens() -> None:
    from actorllm.reasoning import REASONING_PARSERS

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
