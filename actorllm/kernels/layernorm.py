"""RMSNorm, torch reference (the Triton kernels in ``kernels/triton`` are checked against it)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x * rsqrt(mean(x^2) + eps) * weight``, computed in float32.

    x: [T, H] (any leading dims), weight: [H] -> [T, H] in x's dtype.
    """
    if x.dtype == torch.float32 and weight.dtype == torch.float32:
        # One fused op, bit-identical to the three-step form below in float32.
        return F.rms_norm(x, weight.shape, weight, eps)
    # Same rounding as HF's LlamaRMSNorm: normalize in fp32, cast back, then scale.
    return weight * F.rms_norm(x.float(), weight.shape, eps=eps).to(x.dtype)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual = x + residual; out = rms_norm(residual)``.

    x, residual: [T, H]; weight: [H] -> (out [T, H], new residual [T, H]).
    """
    residual = x + residual
    return rms_norm(residual, weight, eps), residual
