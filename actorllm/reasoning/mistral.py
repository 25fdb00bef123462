"""Mistral's reasoning models (Magistral, ``mistral``): ``[THINK]…[/THINK]``, special
tokens (kept in the text the parser reads). Reasoning only after a ``[THINK]``; text
around the block is the answer; a stray ``[/THINK]`` is dropped."""

from __future__ import annotations

from actorllm.reasoning.base import ReasoningParser, Split

BOT, EOT = "[THINK]", "[/THINK]"


class MistralReasoningParser(ReasoningParser):
    markers = (BOT, EOT)
    start_marker, end_marker = BOT, EOT
    keeps_special_tokens = True

    def split(self, text: str, final: bool) -> Split:
        before, bot, after = text.partition(BOT)
        if not bot:
            return Split(reasoning=None, content=text.replace(EOT, "", 1), reasoning_done=True)
        if EOT not in after:
            return Split(reasoning=after, content=before, reasoning_done=False)
        reasoning, _, rest = after.partition(EOT)
        return Split(reasoning=reasoning, content=before + rest, reasoning_done=True)
