"""Building blocks every decoder family shares: RMSNorm (plain or Gemma's ``1 + w``) or
LayerNorm, the gated MLP with a packed ``gate_up_proj``, and the MLP without a gate
(Arcee, StarCoder 2)."""

from __future__ import annotations

from collections.abc import Callable

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


class LayerNorm(nn.Module):
    """LayerNorm with a bias (StarCoder 2, StableLM) or without (Cohere), with
    :class:`RMSNorm`'s two calls."""

    def __init__(self, size: int, eps: float, bias: bool = True) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.bias = nn.Parameter(torch.zeros(size)) if bias else None
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)

    def forward_residual(
        self, x: torch.Tensor, residual: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(layer_norm(x + residual), x + residual)."""
        h = x + residual
        return self(h), h


Norm = RMSNorm | LayerNorm


def make_norm(cfg: CheckpointConfig, ops: Ops, size: int) -> Norm:
    """A decoder layer's (or the final) norm over ``size`` lanes, of the family's kind."""
    if cfg.norm_type in ("layer", "layer_nobias"):
        return LayerNorm(size, cfg.rms_norm_eps, bias=cfg.norm_type == "layer")
    return RMSNorm(ops, size, cfg.rms_norm_eps, cfg.norm_offset)


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


# An un-gated MLP's (up, down) linears under the checkpoint's own names, so GPTQ module
# lists, ignore lists and LoRA targets name them as written.
UNGATED_NAMES = {
    "starcoder2": ("c_fc", "c_proj"),
    "opt": ("fc1", "fc2"),
    "phi": ("fc1", "fc2"),
    "gpt_neox": ("dense_h_to_4h", "dense_4h_to_h"),
    "gptj": ("fc_in", "fc_out"),
    "gpt_bigcode": ("c_fc", "c_proj"),
    "gpt2": ("c_fc", "c_proj"),
    "falcon": ("dense_h_to_4h", "dense_4h_to_h"),
}


class UngatedMLP(nn.Module):
    """down(act(up(x))): Arcee's MLP (ReLU^2, ``up_proj`` / ``down_proj``), StarCoder
    2's and GPTBigCode's (GELU, ``c_fc`` / ``c_proj``), OPT's (ReLU) and Phi's (GELU)
    ``fc1`` / ``fc2``, GPT-NeoX's and Falcon's (GELU, ``dense_h_to_4h`` / ``dense_4h_to_h``),
    GPT-J's
    (``fc_in`` / ``fc_out``), no gate projection to pack."""

    def __init__(self, cfg: CheckpointConfig) -> None:
        super().__init__()
        self.up_name, self.down_name = UNGATED_NAMES.get(cfg.model_type, ("up_proj", "down_proj"))
        up = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=cfg.mlp_bias)
        down = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=cfg.mlp_bias)
        self.add_module(self.up_name, up)
        self.add_module(self.down_name, down)
        # A function, or Apertus's xIELU: a module with its own learned scalars.
        self.act_fn: Callable[[torch.Tensor], torch.Tensor] = (
            XIELU() if cfg.hidden_act == "xielu" else plain_activation(cfg.hidden_act)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        up, down = getattr(self, self.up_name), getattr(self, self.down_name)
        return down(self.act_fn(up(x)))


class XIELU(nn.Module):
    """Apertus's xIELU: ``ap x^2 + b x`` for ``x > 0``, else
    ``(expm1(min(x, eps)) - x) an + b x``, with ``ap = softplus(alpha_p)`` and
    ``an = b + softplus(alpha_n)``; the four scalars are the checkpoint's
    (``mlp.act_fn.alpha_p`` [1], ``alpha_n`` [1], ``beta`` [], ``eps`` [])."""

    def __init__(self) -> None:
        super().__init__()
        self.alpha_p = nn.Parameter(torch.zeros(1))
        self.alpha_n = nn.Parameter(torch.zeros(1))
        self.beta = nn.Parameter(torch.zeros(()))
        self.eps = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [.., I] -> [.., I]."""
        ap = F.softplus(self.alpha_p)
        an = self.beta + F.softplus(self.alpha_n)
        bx = self.beta * x
        neg = (torch.expm1(torch.minimum(x, self.eps)) - x) * an + bx
        return torch.where(x > 0, ap * x * x + bx, neg)
