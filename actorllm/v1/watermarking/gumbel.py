"""vLLM's Gumbel-max watermarkers and detectors (``vllm/v1/watermarking/gumbel.py``).

A watermarked token ``t`` at context ``c`` maximised ``logit + G(u)`` with ``u =
PRF(key, c, t)``, so its ``u`` runs high: the score ``-log(1 - u)`` is Exp(1) for text the
key did not shape, and a sum of ``n`` of them is Gamma(n, 1); the p-value is its survival
function at the observed sum. The dual-key detector weighs key A's and key B's scores
``1 - alpha`` and ``alpha`` (vLLM's early fusion).
"""

import math
import warnings

import torch

from actorllm.core.watermark_config import WatermarkPRFName, derive_watermark_key
from actorllm.kernels.watermark_sample import gumbel_watermark_sample
from actorllm.v1.watermarking.detector import WatermarkDetector
from actorllm.v1.watermarking.prfs import PhiloxPRF, WatermarkPRF, create_prf
from actorllm.v1.watermarking.watermarker import (
    RandomSampler,
    SupportsSpeculativeDecoding,
    Watermarker,
    WatermarkSample,
)


def _gamma_survival_integer_shape(score: float, shape: int) -> float:
    """P(Gamma(shape, 1) > score) for an integer shape: ``exp(-x) sum_k x^k / k!``."""
    if shape <= 0 or score <= 0:
        return 1.0
    log_score = math.log(score)
    log_term = 0.0
    max_log_term = 0.0
    log_terms = [log_term]
    for index in range(1, shape):
        log_term += log_score - math.log(index)
        log_terms.append(log_term)
        max_log_term = max(max_log_term, log_term)
    log_sum = max_log_term + math.log(sum(math.exp(term - max_log_term) for term in log_terms))
    return min(1.0, math.exp(min(0.0, -score + log_sum)))


def _validate_context_width(context_width: int) -> None:
    if context_width < 1:
        raise ValueError("context_width must be positive")
    if context_width > 16:
        warnings.warn(
            "context_width values greater than 16 reduce robustness to edits because "
            "each changed token affects more subsequent watermark contexts",
            stacklevel=3,
        )


class GumbelWatermarker(Watermarker):
    """One key's Gumbel-max draw (the engine's: ``actorllm/kernels/watermark_sample.py``)."""

    def __init__(
        self, key: int, context_width: int = 4, prf: WatermarkPRF | WatermarkPRFName = "philox"
    ) -> None:
        prf = create_prf(prf, key) if isinstance(prf, str) else prf
        if type(prf) is not PhiloxPRF:
            raise ValueError("GumbelWatermarker samples with the Philox PRF only")
        _validate_context_width(context_width)
        self.prf = prf
        self._context_width = context_width

    @property
    def context_width(self) -> int:
        return self._context_width

    def _sample_watermarked(self, logits: torch.Tensor, contexts: torch.Tensor) -> WatermarkSample:
        return WatermarkSample(gumbel_watermark_sample(logits, contexts, self.prf.key), logits)


class DualKeyGumbelWatermarker(Watermarker, SupportsSpeculativeDecoding):
    """Key A (``derive_watermark_key(key, b"key_a")``) or, with probability ``alpha``, key
    B per row; the route is drawn by ``random_sampler`` over ``log([1 - alpha, alpha])``
    (0: key A), as vLLM's."""

    def __init__(
        self, key: int, context_width: int = 4, prf: WatermarkPRFName = "philox", alpha: float = 0.1
    ) -> None:
        if not 0 <= alpha <= 1:
            raise ValueError("alpha must be between 0 and 1")
        self.alpha = alpha
        self.draft_watermarker = GumbelWatermarker(
            derive_watermark_key(key, b"key_a"), context_width, prf
        )
        self.target_watermarker = GumbelWatermarker(
            derive_watermark_key(key, b"key_b"), context_width, prf
        )

    @property
    def context_width(self) -> int:
        return self.draft_watermarker.context_width

    def sample(
        self,
        logits: torch.Tensor,
        contexts: torch.Tensor,
        random_sampler: RandomSampler | None = None,
        skip_mask: torch.Tensor | None = None,
    ) -> WatermarkSample:
        if self.alpha == 0:
            return self.draft_watermarker.sample(logits, contexts, random_sampler, skip_mask)
        if self.alpha == 1:
            return self.target_watermarker.sample(logits, contexts, random_sampler, skip_mask)
        if random_sampler is None:
            raise ValueError("dual-key Gumbel routing requires a random sampler")
        key_a = self.draft_watermarker.sample(logits, contexts, random_sampler, skip_mask)
        key_b = self.target_watermarker.sample(logits, contexts, random_sampler, skip_mask)
        routing = torch.tensor([1 - self.alpha, self.alpha], device=logits.device).log()
        use_key_a = random_sampler(routing.expand(logits.shape[0], -1)) == 0  # [N]
        return WatermarkSample(torch.where(use_key_a, key_a.token_ids, key_b.token_ids), logits)

    def _sample_watermarked(self, logits: torch.Tensor, contexts: torch.Tensor) -> WatermarkSample:
        raise ValueError("dual-key Gumbel routing requires a random sampler")


class GumbelWatermarkDetector(WatermarkDetector):
    def __init__(
        self,
        key: int,
        context_width: int = 4,
        p_value_threshold: float = 0.01,
        prf: WatermarkPRF | WatermarkPRFName = "philox",
        deduplicate_contexts: bool = True,
    ) -> None:
        prf = create_prf(prf, key) if isinstance(prf, str) else prf
        _validate_context_width(context_width)
        super().__init__(context_width, p_value_threshold, deduplicate_contexts)
        self.prf = prf

    def _score_tokens(self, contexts: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        uniforms = self.prf.uniform(contexts, targets.unsqueeze(-1)).squeeze(-1)  # [S]
        return -torch.log1p(-uniforms.to(torch.float64))

    def _get_p_value(self, score: float, num_scored_tokens: int) -> float:
        return _gamma_survival_integer_shape(score, num_scored_tokens)

    def _aggregate_scores(self, token_scores: torch.Tensor) -> float:
        return float(token_scores.sum().item())


class DualKeyGumbelWatermarkDetector(GumbelWatermarkDetector):
    """Detect a dual-key watermark with weighted early fusion: ``alpha`` is key B's
    weight, key A gets ``1 - alpha``."""

    def __init__(
        self,
        key: int,
        context_width: int = 4,
        p_value_threshold: float = 0.01,
        prf: WatermarkPRFName = "philox",
        deduplicate_contexts: bool = True,
        alpha: float = 0.1,
    ) -> None:
        if not 0 <= alpha <= 1:
            raise ValueError("alpha must be between 0 and 1")
        super().__init__(
            derive_watermark_key(key, b"key_a"),
            context_width,
            p_value_threshold,
            prf,
            deduplicate_contexts,
        )
        self.key_b_prf = create_prf(prf, derive_watermark_key(key, b"key_b"))
        self.alpha = alpha

    def _score_tokens(self, contexts: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        scores = torch.stack(
            [
                -torch.log1p(
                    -prf.uniform(contexts, targets.unsqueeze(-1)).squeeze(-1).to(torch.float64)
                )
                for prf in (self.prf, self.key_b_prf)
            ],
            dim=-1,
        )  # [S, 2]
        weights = scores.new_tensor([1 - self.alpha, self.alpha])
        return scores @ weights

    def _get_p_value(self, score: float, num_scored_tokens: int) -> float:
        variance = (1 - self.alpha) ** 2 + self.alpha**2
        if self.alpha in (0, 0.5, 1):
            return _gamma_survival_integer_shape(
                score / variance, round(num_scored_tokens / variance)
            )
        shape = torch.tensor(num_scored_tokens / variance, dtype=torch.float64)
        scaled_score = torch.tensor(score / variance, dtype=torch.float64)
        return float(torch.special.gammaincc(shape, scaled_score).item())
