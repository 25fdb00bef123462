"""Building blocks every decoder family shares: RMSNorm (plain or Gemma's ``1 + w``), the
gated MLP with a packed ``gate_up_proj``, and Arcee's MLP without a gate."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from actorllm.kernels import elementwise
from actorllm.kernels.activation import plain_activation
from actorllm.kernels.moe import gated_activation
from actorllm.kernels.ops import Ops
from actorllm.models.config import CheckpointConfig


class RMSNorm(nn.Module):
    """``x * rsqrt(mean(x^2) + eps) * (offset + weight)``.

    offset 0 (Llama) runs the backend's kernel; offset 1 (Gemma stores ``w`` and scales by
    ``1 + w``) computes in float32 and rounds once at the end, as HF's GemmaRMSNorm does.
    """

    def __init__(self, ops: Ops, size: int, eps: float, offset: float = 0.0) -> None:
        super().__init__()
        self.ops = ops
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps
        self.offset = offset

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.offset:
            native = elementwise.rms_norm(x, self.weight, self.eps, offset=self.offset)
            if native is not None:  # CPU: one pass, the same single rounding
                return native[0]
            normed = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)
            return (normed * (self.offset + self.weight.float())).to(x.dtype)
        return self.ops.rms_norm(x, self.weight, self.eps)

    def forward_residual(
        self, x: torch.Tensor, residual: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(rms_norm(x + residual), x + residual)."""
        if self.offset:
            native = elementwise.rms_norm(x, self.weight, self.eps, residual, self.offset)
            if native is not None and native[1] is not None:
                return native[0], native[1]
            residual = x + residual
            return self(residual), residual
        return self.ops.fused_add_rms_norm(x, residual, self.weight, self.eps)


class MLP(nn.Module):
    """down(act(gate(x)) * up(x)); ``gate_up_proj`` packs gate | up rows."""

    def __init__(
        self, cfg: CheckpointConfig, ops: Ops, intermediate_size: int | None = None
    ) -> None:
        super().__init__()
        self.ops = ops
        inter = intermediate_size or cfg.intermediate_size
        self.shard_sizes = [inter, inter]
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * inter, bias=cfg.mlp_bias)
        self.down_proj = nn.Linear(inter, cfg.hidden_size, bias=cfg.mlp_bias)
        self.silu = cfg.hidden_act in ("silu", "swish")
        self.act = gated_activation(cfg.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        gate_up = self.gate_up_proj(x)  # [T, 2I]
        h = self.ops.silu_and_mul(gate_up) if self.silu else self.act(gate_up)  # [T, I]
        return self.down_proj(h)


class UngatedMLP(nn.Module):
    """down(act(up(x))): Arcee's MLP (ReLU^2), no gate projection to pack."""

    def __init__(self, cfg: CheckpointConfig) -> None:
        super().__init__()
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=cfg.mlp_bias)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=cfg.mlp_bias)
        self.act = plain_activation(cfg.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        return self.down_proj(self.act(self.up_proj(x)))
