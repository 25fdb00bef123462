"""Result types, where vLLM keeps them (``vllm.outputs``).

    from actorllm.outputs import CompletionOutput, RequestOutput
    from actorllm.outputs import EmbeddingRequestOutput, PoolingRequestOutput
    from actorllm.outputs import PromptLogprobs, SampleLogprobs, SamplingMask, WeightVersionSpan

The definitions live in :mod:`actorllm.core` (generation) and
:mod:`actorllm.engine.api.pooling_outputs` (pooling); this module only gives them vLLM's
import path.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from actorllm.core.logprob_types import PromptLogprobs, SampleLogprobs
from actorllm.core.lora import LoRARequest
from actorllm.core.outputs import (
    CompletionOutput,
    Logprob,
    RequestMetrics,
    RequestOutput,
    SamplingMask,
    WeightVersionSpan,
)

# The pooling types load on first use: their module imports torch, and ``import
# actorllm.outputs`` stays light (tests/test_init.py).
_POOLING = (
    "ClassificationOutput",
    "ClassificationRequestOutput",
    "EmbeddingOutput",
    "EmbeddingRequestOutput",
    "PoolingOutput",
    "PoolingRequestOutput",
    "ScoringOutput",
    "ScoringRequestOutput",
)

if TYPE_CHECKING:
    from actorllm.engine.api.pooling_outputs import (
        ClassificationOutput,
        ClassificationRequestOutput,
        EmbeddingOutput,
        EmbeddingRequestOutput,
        PoolingOutput,
        PoolingRequestOutput,
        ScoringOutput,
        ScoringRequestOutput,
    )


def __getattr__(name: str) -> Any:
    if name in _POOLING:
        return getattr(importlib.import_module("actorllm.engine.api.pooling_outputs"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ClassificationOutput",
    "ClassificationRequestOutput",
    "CompletionOutput",
    "EmbeddingOutput",
    "EmbeddingRequestOutput",
    "LoRARequest",
    "Logprob",
    "PoolingOutput",
    "PoolingRequestOutput",
    "PromptLogprobs",
    "RequestMetrics",
    "RequestOutput",
    "SampleLogprobs",
    "SamplingMask",
    "ScoringOutput",
    "ScoringRequestOutput",
    "WeightVersionSpan",
]
