"""LayerNorm over each head's lanes of q or k, the three ways families store its weights
(``CheckpointConfig.qk_norm_kind``; RMSNorm q/k norms, Qwen3's and the others', are
``layers.RMSNorm``):

* ``"layer"`` (Phi's ``qk_layernorm``): one ``[D]`` weight and bias shared by every head;
* ``"layer_heads"`` (Cohere's ``use_qk_norm``): a ``[H, D]`` weight, no bias;
* ``"layer_head_list"`` (StableLM's ``qk_layernorm``): one LayerNorm per head, no bias,
  stored head by head (``norms.{h}.weight``, ``[D]`` each), under HF's own names.

Computed in float32 and rounded once, as Cohere's ``CohereLayerNorm`` does (the same
numbers as ``nn.LayerNorm`` in float32).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

QK_LAYER_NORMS = ("layer", "layer_heads", "layer_head_list")


class _Weight(nn.Module):
    """One head's ``[D]`` weight, named as StableLM's per-head ``nn.LayerNorm``."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))


class QKLayerNorm(nn.Module):
    def __init__(self, kind: str, heads: int, size: int, eps: float) -> None:
        super().__init__()
        if kind not in QK_LAYER_NORMS:
            raise ValueError(f"unknown q/k LayerNorm kind {kind!r} (known: {QK_LAYER_NORMS})")
        self.eps = eps
        self.weight: nn.Parameter | None = None
        self.bias: nn.Parameter | None = None
        self.norms: nn.ModuleList | None = None
        if kind == "layer_head_list":
            self.norms = nn.ModuleList(_Weight(size) for _ in range(heads))
        else:
            self.weight = nn.Parameter(torch.ones(size if kind == "layer" else (heads, size)))
        if kind == "layer":
            self.bias = nn.Parameter(torch.zeros(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H, D] -> [T, H, D]."""
        if self.norms is not None:
            weight = torch.stack([n.get_parameter("weight") for n in self.norms])  # [H, D]
        else:
            assert self.weight is not None
            weight = self.weight  # [D] or [H, D]
        y = F.layer_norm(x.float(), (x.shape[-1],), eps=self.eps) * weight.float()
        if self.bias is not None:
            y = y + self.bias.float()
        return y.to(x.dtype)
