"""Olmo 3 (``olmo3``): ``<think>`` … ``</think>`` written as plain text (ordinary vocabulary
pieces, not special tokens), as ``deepseek_r1``: reasoning up to ``</think>`` (a leading
``<think>`` dropped; the template may write it), then the answer. Structured outputs find
the end in the detokenized text, since the tokenizer merges the tags with their
neighbours."""

from __future__ import annotations

from actorllm.reasoning.base import ReasoningParser, Split
from actorllm.reasoning.think_tags import END, START, split_think


class Olmo3ReasoningParser(ReasoningParser):
    markers = (START, END)
    start_texts, end_texts = (START,), (END,)
    text_rule = "unless_closed"

    def split(self, text: str, final: bool) -> Split:
        return split_think(text)
