"""vLLM's config objects, where vLLM keeps them (``vllm.config``).

    from actorllm.config import CompilationConfig, KVTransferConfig, SpeculativeConfig

Each is accepted by ``LLM(...)``, ``EngineArgs(...)`` and ``AsyncEngineArgs(...)`` as the
dict of the same fields is (:mod:`actorllm.compat.vllm.config_objects`);
``WeightTransferConfig`` is :mod:`actorllm.engine.config.weight_transfer`'s,
``WatermarkConfig`` the engine's own (:mod:`actorllm.config.watermarking`: vLLM's fields
and checks; ``LLM(watermark_config=...)`` takes it or its fields' dict). vLLM's
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
from actorllm.config.watermarking import WatermarkConfig
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
    "WatermarkConfig",
    "WeightTransferConfig",
]
