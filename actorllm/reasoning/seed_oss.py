"""ByteDance Seed-OSS (``seed_oss``): ``<seed:think>…</seed:think>``, as ``qwen3`` (vLLM
0.32 shares the grammar): ``enable_thinking`` (default on) starts the output inside the
reasoning, up to the end tag (a leading start tag dropped) or a ``<seed:tool_call>``;
``enable_thinking: false`` makes it all answer."""

from __future__ import annotations

from actorllm.reasoning.think_tags import Qwen3ReasoningParser

START, END = "<seed:think>", "</seed:think>"
TOOL_CALL = "<seed:tool_call>"


class SeedOssReasoningParser(Qwen3ReasoningParser):
    markers = (START, END, TOOL_CALL)
    start_marker, end_marker = START, END
    tool_call = TOOL_CALL
