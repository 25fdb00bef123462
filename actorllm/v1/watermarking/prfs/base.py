"""vLLM's ``WatermarkPRF`` interface: ``uniform(contexts [..., W], token_ids) -> float32``."""

from abc import ABC, abstractmethod

import torch

from actorllm.kernels.philox_prf import uint32_to_uniform


class WatermarkPRF(ABC):
    @abstractmethod
    def uniform(self, contexts: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


__all__ = ["WatermarkPRF", "uint32_to_uniform"]
