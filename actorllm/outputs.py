"""Result types, where vLLM keeps them (``vllm.outputs``).

    from actorllm.outputs import CompletionOutput, RequestOutput
    from actorllm.outputs import EmbeddingRequestOutput, PoolingRequestOutput

The definitions live in :mod:`actorllm.core` (generation) and
:mod:`actorllm.engine.api.pooling_outputs` (pooling); this module only gives them vLLM's
import path.
"""

from actorllm.core.outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput
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

__all__ = [
    "ClassificationOutput",
    "ClassificationRequestOutput",
    "CompletionOutput",
    "EmbeddingOutput",
    "EmbeddingRequestOutput",
    "Logprob",
    "PoolingOutput",
    "PoolingRequestOutput",
    "RequestMetrics",
    "RequestOutput",
    "ScoringOutput",
    "ScoringRequestOutput",
]
