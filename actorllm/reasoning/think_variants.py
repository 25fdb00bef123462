"""More ``<think>…</think>`` families, as vLLM's ``--reasoning-parser`` names them.

* ``deepseek_v3`` (DeepSeek-V3.1): thinking when the effective ``chat_template_kwargs``
  set ``thinking`` or ``enable_thinking`` (default off, as vLLM's): then as
  ``deepseek_r1``; otherwise the output is all answer.
* ``glm45`` (GLM-4.5 to 4.7; vLLM 0.32 serves it with its glm47_moe parser): as
  ``qwen3``, thinking unless ``thinking`` or ``enable_thinking`` is given and neither is
  true; the reasoning's trailing whitespace is dropped.
* ``step3``: the template opens the block, the output is reasoning up to ``</think>``
  (vLLM's step3 keeps a ``<think>`` the output writes).
* ``minimax_m2`` (vLLM 0.32's engine grammar): as ``glm45`` always thinking, with
  ``<minimax:tool_call>`` ending the reasoning.
* ``minimax_m2_append_think``: no split: the whole output is the answer, with the
  ``<think>`` the template opened put back in front of it (structured outputs still start
  after ``</think>``, as the output starts inside the reasoning).
* ``ernie45`` (ERNIE-4.5 thinking): as ``deepseek_r1``; the answer after ``</think>`` may
  be wrapped in ``<response>…</response>``, which is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from actorllm.reasoning.base import ReasoningParser, Split
from actorllm.reasoning.think_tags import (
    END,
    START,
    DeepSeekR1ReasoningParser,
    Qwen3ReasoningParser,
    split_at_end,
    split_think,
)


class DeepSeekV3ReasoningParser(ReasoningParser):
    markers = (START, END)
    start_marker, end_marker = START, END

    @classmethod
    def thinking_of(cls, chat_template_kwargs: Mapping[str, Any]) -> bool | None:
        kw = chat_template_kwargs
        return bool(kw.get("thinking", False)) or bool(kw.get("enable_thinking", False))

    def split(self, text: str, final: bool) -> Split:
        if self.thinking:
            return split_think(text)
        return Split(reasoning=None, content=text, reasoning_done=True)


class Glm45ReasoningParser(Qwen3ReasoningParser):
    strip_reasoning = True

    @classmethod
    def thinking_of(cls, chat_template_kwargs: Mapping[str, Any]) -> bool | None:
        thinking = chat_template_kwargs.get("thinking")
        enable = chat_template_kwargs.get("enable_thinking")
        if thinking is None and enable is None:
            return True
        return bool(thinking) or bool(enable)


class Step3ReasoningParser(DeepSeekR1ReasoningParser):
    def split(self, text: str, final: bool) -> Split:
        return split_at_end(text, END, ())


class MiniMaxM2ReasoningParser(Glm45ReasoningParser):
    markers = (START, END, "<minimax:tool_call>")
    tool_call = "<minimax:tool_call>"

    @classmethod
    def thinking_of(cls, chat_template_kwargs: Mapping[str, Any]) -> bool | None:
        return True  # no switch: the template always opens the block


class MiniMaxM2AppendThinkReasoningParser(ReasoningParser):
    markers = ()
    start_marker, end_marker = START, END  # the constraint starts after </think>

    @classmethod
    def thinking_of(cls, chat_template_kwargs: Mapping[str, Any]) -> bool | None:
        return True

    def split(self, text: str, final: bool) -> Split:
        return Split(reasoning=None, content=START + text, reasoning_done=True)


RESPONSE_START, RESPONSE_END = "<response>", "</response>"


class Ernie45ReasoningParser(ReasoningParser):
    markers = (START, END, RESPONSE_START, RESPONSE_END)
    start_marker, end_marker = START, END

    @classmethod
    def thinking_of(cls, chat_template_kwargs: Mapping[str, Any]) -> bool | None:
        return True  # as deepseek_r1

    def split(self, text: str, final: bool) -> Split:
        s = split_think(text)
        if not s.reasoning_done:
            return s
        content = s.content.lstrip("\n")
        if content.startswith(RESPONSE_START):
            content = content[len(RESPONSE_START) :]
            end = content.rfind(RESPONSE_END)
            if end >= 0:
                content = content[:end]
        elif not final and RESPONSE_START.startswith(content):
            content = ""  # may still open <response>
        else:
            content = s.content
        return Split(reasoning=s.reasoning, content=content, reasoning_done=True)
