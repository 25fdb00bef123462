"""Reasoning parsers by name (``--reasoning-parser``)."""

from __future__ import annotations

from actorllm.reasoning.base import (
    ReasoningDelta,
    ReasoningParser,
    ReasoningStreamer,
    Split,
)
from actorllm.reasoning.granite import GraniteReasoningParser
from actorllm.reasoning.think_tags import (
    DeepSeekR1ReasoningParser,
    Qwen3ReasoningParser,
)

__all__ = [
    "REASONING_PARSERS",
    "ReasoningDelta",
    "ReasoningParser",
    "ReasoningStreamer",
    "Split",
    "UnknownReasoningParserError",
    "get_reasoning_parser",
]

REASONING_PARSERS: dict[str, type[ReasoningParser]] = {
    "deepseek_r1": DeepSeekR1ReasoningParser,
    "qwen3": Qwen3ReasoningParser,
    "granite": GraniteReasoningParser,
}


class UnknownReasoningParserError(ValueError):
    """``--reasoning-parser`` names no known parser."""


def get_reasoning_parser(name: str) -> type[ReasoningParser]:
    try:
        return REASONING_PARSERS[name]
    except KeyError:
        raise UnknownReasoningParserError(
            f"unknown reasoning parser {name!r}; choose one of "
            f"{', '.join(sorted(REASONING_PARSERS))}"
        ) from None
