"""The sampler's watermarked draw: for the rows :mod:`.watermark_rows` picked, the token
is ``argmax(processed logits + keyed Gumbel noise)`` in place of the random draw.

Where it sits is vLLM 0.32's (``GPUWatermarkSampler._sample_random``): after the grammar
mask, the additive masks, custom logits processors and penalties (all applied to the
logits the sampler is given), then temperature, min-p, top-k and top-p as the ordinary
draw applies them; greedy rows never get here. Logprobs are the raw ones, computed
before, so they are the same as without the watermark.

``dual_key_gumbel`` (vLLM's ``DualKeyGumbelWatermarker``) keys each row with key A
(``derive_watermark_key(key, b"key_a")``) or, with probability ``alpha``, key B; the
route is drawn from the row's own uniform (seeded rows: a function of seed and output
position, so a replay routes the same), as vLLM draws it from the row's generator.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

from actorllm.core.watermark_config import WatermarkConfig, derive_watermark_key
from actorllm.kernels.sampling import apply_min_p, apply_top_k_top_p
from actorllm.kernels.watermark_sample import keyed_watermark_sample


class WatermarkDraw:
    """The engine's watermark (its keys, resolved once) applied to a step's rows."""

    def __init__(self, config: WatermarkConfig) -> None:
        self.config = config
        if config.context_width > 16:  # vLLM's warning, as its model runner builds its own
            warnings.warn(
                "context_width values greater than 16 reduce robustness to edits because "
                "each changed token affects more subsequent watermark contexts",
                stacklevel=2,
            )
        if config.algorithm == "dual_key_gumbel":
            self.key_a = derive_watermark_key(config.key, b"key_a")
            self.key_b = derive_watermark_key(config.key, b"key_b")
            self.alpha = config.alpha
        else:
            self.key_a = self.key_b = config.key
            self.alpha = 0.0

    def keys(self, n: int, uniforms: Callable[[], list[float]]) -> list[int]:
        """[n] key per row; ``uniforms`` (the rows' U[0, 1) draws) is read only when both
        keys are in play (0 < alpha < 1)."""
        if self.alpha == 0.0:
            return [self.key_a] * n
        if self.alpha == 1.0:
            return [self.key_b] * n
        return [self.key_a if u < 1.0 - self.alpha else self.key_b for u in uniforms()]

    def __call__(
        self,
        logits: torch.Tensor,
        contexts: torch.Tensor,
        temperature: torch.Tensor,
        top_k: torch.Tensor,
        top_p: torch.Tensor,
        min_p: torch.Tensor,
        keys: list[int],
    ) -> torch.Tensor:
        """logits: [R, V] (the watermarked rows, any float dtype; not modified); contexts:
        [R, W] int64; temperature/top_k/top_p/min_p: [R] (temperature > 0) -> [R] int64."""
        x = logits.float() / temperature.unsqueeze(1)  # [R, V], a new tensor
        x = apply_top_k_top_p(apply_min_p(x, min_p), top_k, top_p)
        return keyed_watermark_sample(x, contexts, keys)
