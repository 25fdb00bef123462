"""``<think>…</think>`` reasoning: DeepSeek-R1 and Qwen3.

* ``deepseek_r1``: the chat template opens ``<think>`` in the prompt, so the output is
  reasoning up to ``</think>`` (a leading ``<think>`` is dropped), then the answer. No
  ``</think>`` yet: everything is reasoning.
* ``qwen3``: reasoning only when the output opens with ``<think>``, or the prompt left a
  ``<think>`` open (Qwen3 "thinking" templates do); with ``enable_thinking: false`` the
  template closes the think block in the prompt and the whole output is the answer.
"""

from __future__ import annotations

from actorllm.reasoning.base import ReasoningParser, Split

START, END = "<think>", "</think>"


def split_think(text: str, start: str = START, end: str = END) -> Split:
    """Reasoning up to ``end`` (a leading ``start`` dropped), then the answer."""
    stripped = text.lstrip()
    body = stripped[len(start) :] if stripped.startswith(start) else text
    if end not in body:
        return Split(reasoning=body, content="", reasoning_done=False)
    reasoning, content = body.split(end, 1)
    return Split(reasoning=reasoning, content=content, reasoning_done=True)


class DeepSeekR1ReasoningParser(ReasoningParser):
    markers = (START, END)
    start_marker, end_marker = START, END

    def split(self, text: str, final: bool) -> Split:
        return split_think(text)


class Qwen3ReasoningParser(ReasoningParser):
    markers = (START, END)
    start_marker, end_marker = START, END

    def split(self, text: str, final: bool) -> Split:
        stripped = text.lstrip()
        if stripped.startswith(START) or self.prompt_opened:
            return split_think(text)
        if not final and START.startswith(stripped):
            return Split(reasoning=None, content="", reasoning_done=False)  # may open one
        return Split(reasoning=None, content=text, reasoning_done=True)
