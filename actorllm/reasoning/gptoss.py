"""gpt-oss's reasoning (``--reasoning-parser openai_gptoss``, vLLM's name): the harmony
``analysis`` channel.

On a gpt-oss model the server splits every output by its harmony channels whether or not
this parser is named; naming it also makes structured outputs wait for the answer: the
grammar starts after ``<|channel|>final<|message|>`` (``end_marker``), as vLLM's
``is_reasoning_end``.

    >>> p = GptOssReasoningParser()
    >>> p.extract("<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant"
    ...     "<|channel|>final<|message|>4")
    ('Easy.', '4')
"""

from __future__ import annotations

from actorllm.core.harmony import CHANNEL, MESSAGE, START, HarmonyMessage, parse_output
from actorllm.reasoning.base import ReasoningParser, Split


def is_reasoning(m: HarmonyMessage) -> bool:
    """The assistant's ``analysis`` messages are its reasoning."""
    return m.channel == "analysis" and m.role == "assistant"


def reasoning_text(messages: list[HarmonyMessage]) -> str | None:
    """The analysis messages' texts, one per line; None when there are none."""
    parts = [m.content for m in messages if is_reasoning(m)]
    return "\n".join(parts) if parts else None


class GptOssReasoningParser(ReasoningParser):
    keeps_special_tokens = True
    start_marker = f"{START}assistant"
    end_marker = f"{CHANNEL}final{MESSAGE}"
    budget_markers = False  # channels, not a reasoning block (vLLM names no strings either)

    def split(self, text: str, final: bool) -> Split:
        out = parse_output(text, final=final)
        msgs = out.all()
        answer = [m.content for m in msgs if m.channel == "final"]
        return Split(
            reasoning=reasoning_text(msgs),
            content="\n".join(answer),
            reasoning_done=any(m.channel not in (None, "analysis") for m in msgs),
        )
