"""vLLM's ``vllm.v1.watermarking.prfs``: the watermark PRFs (Philox4x32-10 only, as vLLM)."""

from actorllm.core.watermark_config import WatermarkPRFName
from actorllm.v1.watermarking.prfs.base import WatermarkPRF, uint32_to_uniform
from actorllm.v1.watermarking.prfs.philox import PhiloxPRF


def create_prf(name: WatermarkPRFName, key: int) -> WatermarkPRF:
    if name == "philox":
        return PhiloxPRF(key)
    raise ValueError(f"Unknown watermark PRF: {name}")


__all__ = ["PhiloxPRF", "WatermarkPRF", "create_prf", "uint32_to_uniform"]
