"""vLLM's ``vllm.v1.watermarking``: the watermark detectors, PRFs and key derivation.

Score text an engine watermarked with ``--watermark-config``::

    from actorllm.v1.watermarking import GumbelWatermarkDetector

    detector = GumbelWatermarkDetector(key=1234, context_width=4)
    detection = detector.detect(list(output.outputs[0].token_ids))
    detection.is_watermarked, detection.p_value

Ported from vLLM 0.32, bit for bit in the PRF: text either engine watermarked scores the
same under either engine's detector.
"""

from actorllm.core.watermark_config import derive_watermark_key
from actorllm.v1.watermarking.detector import WatermarkDetection, WatermarkDetector
from actorllm.v1.watermarking.factory import create_watermarker
from actorllm.v1.watermarking.gumbel import (
    DualKeyGumbelWatermarkDetector,
    DualKeyGumbelWatermarker,
    GumbelWatermarkDetector,
    GumbelWatermarker,
)
from actorllm.v1.watermarking.prfs import PhiloxPRF, WatermarkPRF, create_prf
from actorllm.v1.watermarking.watermarker import (
    SupportsSpeculativeDecoding,
    Watermarker,
    WatermarkSample,
)

__all__ = [
    "DualKeyGumbelWatermarkDetector",
    "DualKeyGumbelWatermarker",
    "GumbelWatermarkDetector",
    "GumbelWatermarker",
    "PhiloxPRF",
    "SupportsSpeculativeDecoding",
    "WatermarkDetection",
    "WatermarkDetector",
    "WatermarkPRF",
    "WatermarkSample",
    "Watermarker",
    "create_prf",
    "create_watermarker",
    "derive_watermark_key",
]
