"""vLLM's ``vllm.config.watermarking``: ``WatermarkConfig`` and its key derivation.

    >>> from actorllm.config.watermarking import WatermarkConfig
    >>> WatermarkConfig(key=1234, algorithm="dual_key_gumbel")
    WatermarkConfig(algorithm='dual_key_gumbel', alpha=0.1, context_width=4, deduplicate_contexts='single_turn', deduplicate_contexts_max_history=8192, prf='philox', allow_target_only_watermarking=False)

``LLM(watermark_config=...)`` takes it or the dict of its fields; the command line's
``--watermark-config`` takes that dict as JSON.
"""  # noqa: E501

from actorllm.core.watermark_config import (
    WatermarkConfig,
    WatermarkContextScope,
    WatermarkingAlgorithm,
    WatermarkPRFName,
    derive_watermark_key,
)

__all__ = [
    "WatermarkConfig",
    "WatermarkContextScope",
    "WatermarkPRFName",
    "WatermarkingAlgorithm",
    "derive_watermark_key",
]
