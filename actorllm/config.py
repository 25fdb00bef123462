"""vLLM's config objects, where vLLM keeps them (``vllm.config``).

    from actorllm.config import CompilationConfig, KVTransferConfig, SpeculativeConfig

Each is accepted by ``LLM(...)``, ``EngineArgs(...)`` and ``AsyncEngineArgs(...)`` as the
dict of the same fields is (:mod:`actorllm.compat.vllm.config_objects`);
``WeightTransferConfig`` is :mod:`actorllm.engine.config.weight_transfer`'s. vLLM's
configs that only its engine builds (``VllmConfig``, ``ModelConfig``, ``CacheConfig``...)
are not here: actorllm's one settings object is ``EngineConfig``.
"""

from actorllm.compat.vllm.config_objects import (
    CompilationConfig,
    CompilationMode,
    CUDAGraphMode,
    KVEventsConfig,
    KVTransferConfig,
    PoolerConfig,
    ProfilerConfig,
    ReasoningConfig,
    SpeculativeConfig,
    StructuredOutputsConfig,
)
from actorllm.engine.config.weight_transfer import WeightTransferConfig

__all__ = [
    "CUDAGraphMode",
    "CompilationConfig",
    "CompilationMode",
    "KVEventsConfig",
    "KVTransferConfig",
    "PoolerConfig",
    "ProfilerConfig",
    "ReasoningConfig",
    "SpeculativeConfig",
    "StructuredOutputsConfig",
    "WeightTransferConfig",
]
