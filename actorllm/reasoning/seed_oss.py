"""ByteDance Seed-OSS (``seed_oss``): ``<seed:think>…</seed:think>``, as ``deepseek_r1``:
reasoning up to the end tag (a leading start tag dropped), then the answer."""

from __future__ import annotations

from actorllm.reasoning.base import ReasoningParser, Split
from actorllm.reasoning.think_tags import split_think

START, END = "<seed:think>", "</seed:think>"


class SeedOssReasoningParser(ReasoningParser):
    markers = (START, END)
    start_marker, end_marker = START, END

    def split(self, text: str, final: bool) -> Split:
        return split_think(text, START, END)
