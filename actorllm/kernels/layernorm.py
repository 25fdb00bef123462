"""RMSNorm, torch reference (the Triton kernels in ``kernels/triton`` are checked against it)."""

from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x * rsqrt(mean(x^2) + eps) * weight``, computed in float32.

    x: [T, H] (any leading dims), weight: [H] -> [T, H] in x's dtype.
    """
    orig_dtype = x.dtype
    xf = x.float()
    var = xf.pow(2).mean(dim=-1, keepdim=True)
    xf = xf * torch.rsqrt(var + eps)
    # Same rounding as HF's LlamaRMSNorm: normalize in fp32, cast back, then scale.
    return weight * xf.to(orig_dtype)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual = x + residual; out = rms_norm(residual)``.

    x, residual: [T, H]; weight: [H] -> (out [T, H], new residual [T, H]).
    """
    residual = x + residual
    return rms_norm(residual, weight, eps), residual
