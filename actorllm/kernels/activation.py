"""Gated activations, torch reference."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` for the fused gate-up projection's output.

    x: [T, 2 * I] laid out as [gate | up] -> [T, I].
    """
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]).mul_(x[..., d:])  # in place on silu's fresh output
