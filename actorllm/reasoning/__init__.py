"""Reasoning parsers by name (``--reasoning-parser``)."""

from __future__ import annotations

from actorllm.reasoning.base import (
    ReasoningDelta,
    ReasoningParser,
    ReasoningStreamer,
    Split,
)
from actorllm.reasoning.gptoss import GptOssReasoningParser
from actorllm.reasoning.granite import GraniteReasoningParser
from actorllm.reasoning.mistral import MistralReasoningParser
from actorllm.reasoning.olmo3 import Olmo3ReasoningParser
from actorllm.reasoning.seed_oss import SeedOssReasoningParser
from actorllm.reasoning.think_tags import (
    DeepSeekR1ReasoningParser,
    Qwen3ReasoningParser,
)
from actorllm.reasoning.think_variants import (
    DeepSeekV3ReasoningParser,
    Ernie45ReasoningParser,
    Glm45ReasoningParser,
    MiniMaxM2AppendThinkReasoningParser,
    MiniMaxM2ReasoningParser,
    Step3ReasoningParser,
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

# vLLM's --reasoning-parser names. Not here (refused by name at start-up): hunyuan_a13b,
# kimi_k2 and the rest.
REASONING_PARSERS: dict[str, type[ReasoningParser]] = {
    "deepseek_r1": DeepSeekR1ReasoningParser,
    "deepseek_v3": DeepSeekV3ReasoningParser,
    "ernie45": Ernie45ReasoningParser,
    "glm45": Glm45ReasoningParser,
    "granite": GraniteReasoningParser,
    "minimax_m2": MiniMaxM2ReasoningParser,
    "minimax_m2_append_think": MiniMaxM2AppendThinkReasoningParser,
    "mistral": MistralReasoningParser,
    "openai_gptoss": GptOssReasoningParser,
    "olmo3": Olmo3ReasoningParser,
    "qwen3": Qwen3ReasoningParser,
    "seed_oss": SeedOssReasoningParser,
    "step3": Step3ReasoningParser,
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
