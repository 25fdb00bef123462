"""vLLM's ``PhiloxPRF`` over :mod:`actorllm.kernels.philox_prf` (the same words, bit for bit)."""

import torch

from actorllm.kernels.philox_prf import key_words, philox_uniform
from actorllm.v1.watermarking.prfs.base import WatermarkPRF


class PhiloxPRF(WatermarkPRF):
    """Philox4x32-10 keyed on a 64-bit key: int64 tensor ops, on CPU or GPU."""

    version = "philox4x32-10-v1"

    def __init__(self, key: int) -> None:
        key_words(key)  # refuses a key outside 64 bits, with vLLM's message
        self.key = key

    def uniform(self, contexts: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
        """contexts [..., W], token_ids broadcastable to [..., T] -> [..., T] float32."""
        return philox_uniform(self.key, contexts, token_ids)
