"""``<think>…</think>`` reasoning: DeepSeek-R1 and Qwen3.

* ``deepseek_r1``: the chat template opens ``<think>`` in the prompt, so the output is
  reasoning up to ``</think>`` (a leading ``<think>`` is dropped), then the answer. No
  ``</think>`` yet: everything is reasoning.
* ``qwen3``: as vLLM 0.32's, the switch is the effective ``chat_template_kwargs``'
  ``enable_thinking`` (default on). On: the output starts inside the reasoning, up to
  ``</think>``, whether or not it writes ``<think>`` (every ``<think>`` in the reasoning
  is dropped, and a repeated ``</think>`` in the answer); a ``<tool_call>`` also ends the
  reasoning (and starts the answer). ``enable_thinking: false``: the whole output is the
  answer, as written.

    >>> Qwen3ReasoningParser().extract("Easy.</think>4")
    ('Easy.', '4')
    >>> Qwen3ReasoningParser(chat_template_kwargs={"enable_thinking": False}).extract("4")
    (None, '4')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from actorllm.core.marker_text import hold_back
from actorllm.reasoning.base import ReasoningParser, Split

START, END = "<think>", "</think>"
TOOL_CALL = "<tool_call>"


def split_think(
    text: str, start: str = START, end: str = END, implicit_ends: tuple[str, ...] = ()
) -> Split:
    """Reasoning up to ``end`` (a leading ``start`` dropped), then the answer. One of
    ``implicit_ends`` (a tool call's opener) ends the reasoning too, and begins the answer."""
    stripped = text.lstrip()
    body = stripped[len(start) :] if stripped.startswith(start) else text
    return split_at_end(body, end, implicit_ends)


def split_at_end(text: str, end: str, implicit_ends: tuple[str, ...]) -> Split:
    """``text`` split at its first ``end`` (dropped) or ``implicit_ends`` marker (kept)."""
    cut, skip = text.find(end), len(end)
    for marker in implicit_ends:
        at = text.find(marker)
        if at >= 0 and (cut < 0 or at < cut):
            cut, skip = at, 0
    if cut < 0:
        return Split(reasoning=text, content="", reasoning_done=False)
    return Split(reasoning=text[:cut], content=text[cut + skip :], reasoning_done=True)


class DeepSeekR1ReasoningParser(ReasoningParser):
    markers = (START, END)
    start_marker, end_marker = START, END

    @classmethod
    def thinking_of(cls, chat_template_kwargs: Mapping[str, Any]) -> bool | None:
        return True  # the template always opens the block

    def split(self, text: str, final: bool) -> Split:
        return split_think(text)


class Qwen3ReasoningParser(ReasoningParser):
    markers = (START, END, TOOL_CALL)
    start_marker, end_marker = START, END
    tool_call: ClassVar[str] = TOOL_CALL  # ends the reasoning without its end marker
    strip_reasoning: ClassVar[bool] = False  # drop the reasoning's trailing whitespace

    @classmethod
    def thinking_of(cls, chat_template_kwargs: Mapping[str, Any]) -> bool | None:
        return bool(chat_template_kwargs.get("enable_thinking", True))

    def split(self, text: str, final: bool) -> Split:
        if not self.thinking:
            return Split(reasoning=None, content=text, reasoning_done=True)
        start, end = self.start_marker, self.end_marker
        assert start is not None and end is not None
        s = split_at_end(text, end, (self.tool_call,))
        # vLLM's grammar drops every <think> in the reasoning (the leading one too, keeping
        # the whitespace before it) and a repeated </think> in the answer.
        s.reasoning = (s.reasoning or "").replace(start, "")
        s.content = s.content.replace(end, "")
        if self.strip_reasoning and s.reasoning:
            # (Streamed: nor the whitespace before a marker's held-back prefix.)
            whole = s.reasoning_done or final
            s.reasoning = (s.reasoning if whole else hold_back(s.reasoning, self.markers)).rstrip()
        return s
