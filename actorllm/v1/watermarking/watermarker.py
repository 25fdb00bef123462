"""vLLM's ``Watermarker`` interface (``vllm/v1/watermarking/watermarker.py``): a draw of
token ids from logits and contexts, with rows ``skip_mask`` marks drawn by an ordinary
``random_sampler`` instead.

vLLM's engine passes its GPU sampler's ``RandomSampler``; here any callable from logits
``[N, V]`` to token ids ``[N]`` will do (the engine's own draw lives in
``actorllm/worker/watermark_draw.py``, not behind this interface).
"""

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

RandomSampler = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class WatermarkSample:
    token_ids: torch.Tensor  # [N] int64
    logits: torch.Tensor  # [N, V], the logits the draw read


class Watermarker(ABC):
    @property
    @abstractmethod
    def context_width(self) -> int:
        raise NotImplementedError

    def sample(
        self,
        logits: torch.Tensor,
        contexts: torch.Tensor,
        random_sampler: RandomSampler | None = None,
        skip_mask: torch.Tensor | None = None,
    ) -> WatermarkSample:
        """logits: [N, V] processed; contexts: [N, W]; skip_mask: [N] bool, rows drawn by
        ``random_sampler`` instead of the watermark."""
        watermarked = self._sample_watermarked(logits, contexts)
        if skip_mask is None:
            return watermarked
        if random_sampler is None:
            raise ValueError("skip_mask requires a random sampler")
        token_ids = torch.where(skip_mask, random_sampler(logits), watermarked.token_ids)
        return WatermarkSample(token_ids, watermarked.logits)

    @abstractmethod
    def _sample_watermarked(self, logits: torch.Tensor, contexts: torch.Tensor) -> WatermarkSample:
        raise NotImplementedError


@runtime_checkable
class SupportsSpeculativeDecoding(Protocol):
    """A watermarker compatible with standard speculative rejection sampling."""

    draft_watermarker: Watermarker
    target_watermarker: Watermarker
