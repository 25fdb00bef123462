"""vLLM's ``create_watermarker``: the watermarker a ``WatermarkConfig`` describes."""

from actorllm.core.watermark_config import WatermarkConfig
from actorllm.v1.watermarking.gumbel import DualKeyGumbelWatermarker, GumbelWatermarker
from actorllm.v1.watermarking.watermarker import Watermarker


def create_watermarker(config: WatermarkConfig) -> Watermarker:
    if config.algorithm == "gumbel":
        return GumbelWatermarker(config.key, config.context_width, config.prf)
    if config.algorithm == "dual_key_gumbel":
        return DualKeyGumbelWatermarker(config.key, config.context_width, config.prf, config.alpha)
    raise ValueError(f"Unknown watermarking algorithm: {config.algorithm}")
