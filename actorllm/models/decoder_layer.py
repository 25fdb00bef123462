"""The shared decoder's layers (``models/llama.py``): which norms a layer has
(``norm_layout``) and the block that runs them. The residual stream is carried as
``x + residual`` so that each add is fused into the next norm.

* :class:`DecoderLayer`: attention, then the MLP (dense, un-gated or sparse MoE), with
  the layout's pre- and post-sublayer norms (Llama, Gemma's sandwich, OLMo 2's post);
* :class:`ParallelDecoderLayer`: attention and MLP side by side (Cohere, Phi, StableLM's
  parallel residual; GPT-NeoX's with a norm each);
* :class:`PostNormDecoderLayer`: each norm after its residual add (OPT-350m).
"""

from __future__ import annotations

import torch
from torch import nn

from actorllm.kernels.ops import Ops
from actorllm.models.attention import AttentionMetadata
from actorllm.models.config import CheckpointConfig
from actorllm.models.decoder_attention import Attention
from actorllm.models.layers import MLP, Norm, UngatedMLP, make_norm
from actorllm.models.moe import SparseMoeBlock
from actorllm.models.parallel import TPComm

# Each norm_layout's norms, by role -> HF attribute name (None: the layout has none).
_NORMS: dict[str, dict[str, str | None]] = {
    "pre": {
        "pre_attn": "input_layernorm",
        "post_attn": None,
        "pre_mlp": "post_attention_layernorm",
        "post_mlp": None,
    },
    "sandwich": {
        "pre_attn": "input_layernorm",
        "post_attn": "post_attention_layernorm",
        "pre_mlp": "pre_feedforward_layernorm",
        "post_mlp": "post_feedforward_layernorm",
    },
    "post": {
        "pre_attn": None,
        "post_attn": "post_attention_layernorm",
        "pre_mlp": None,
        "post_mlp": "post_feedforward_layernorm",
    },
    # Cohere: one norm; attention and MLP run side by side on it (ParallelDecoderLayer).
    "parallel": {
        "pre_attn": "input_layernorm",
        "post_attn": None,
        "pre_mlp": None,
        "post_mlp": None,
    },
    # Apertus: Llama's two norms under other names.
    "apertus": {
        "pre_attn": "attention_layernorm",
        "post_attn": None,
        "pre_mlp": "feedforward_layernorm",
        "post_mlp": None,
    },
    # GPT-NeoX's use_parallel_residual: Llama's two norms, each read from the layer's input
    # (attention and MLP side by side).
    "parallel2": {
        "pre_attn": "input_layernorm",
        "post_attn": None,
        "pre_mlp": "post_attention_layernorm",
        "post_mlp": None,
    },
    # OPT: Llama's two norms under its names (its per-layer final_layer_norm is the norm
    # *before* the MLP).
    "opt": {
        "pre_attn": "self_attn_layer_norm",
        "post_attn": None,
        "pre_mlp": "final_layer_norm",
        "post_mlp": None,
    },
    # OPT-350m (PostNormDecoderLayer): each of them after its sublayer's residual add.
    "opt_post": {
        "pre_attn": None,
        "post_attn": "self_attn_layer_norm",
        "pre_mlp": None,
        "post_mlp": "final_layer_norm",
    },
    # GLM-4: Gemma 2's four norms under other names (its post_attention_layernorm is the
    # norm *before* the MLP).
    "glm4": {
        "pre_attn": "input_layernorm",
        "post_attn": "post_self_attn_layernorm",
        "pre_mlp": "post_attention_layernorm",
        "post_mlp": "post_mlp_layernorm",
    },
}


def _enter(
    norm: Norm | None, x: torch.Tensor, residual: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Add the pending residual (the stream is ``x + residual``) and norm it if the layout
    has a norm here: (sublayer input, new residual stream)."""
    if residual is None:
        return (norm(x) if norm is not None else x), x
    if norm is not None:
        return norm.forward_residual(x, residual)
    h = x + residual
    return h, h


class DecoderLayer(nn.Module):
    def __init__(self, cfg: CheckpointConfig, ops: Ops, layer_idx: int) -> None:
        super().__init__()
        self.is_sliding = cfg.sliding_windows[layer_idx] is not None
        self.self_attn = Attention(cfg, ops, layer_idx)
        moe = bool(cfg.moe_layers) and cfg.moe_layers[layer_idx]
        self.mlp: nn.Module = (
            SparseMoeBlock(cfg, ops) if moe else MLP(cfg, ops) if cfg.mlp_gated else UngatedMLP(cfg)
        )
        self.residual_multiplier = cfg.residual_multiplier
        self.comm: TPComm | None = None  # tensor parallel: sums the ranks' MLP outputs
        self.norm_names = _NORMS[cfg.norm_layout]
        for name in self.norm_names.values():
            if name is not None:
                self.add_module(name, make_norm(cfg, ops, cfg.hidden_size))

    def _norm(self, role: str) -> Norm | None:
        name = self.norm_names[role]
        return None if name is None else getattr(self, name)

    def forward(
        self,
        positions: torch.Tensor,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        cos_sin: torch.Tensor,
        kv_cache: tuple[torch.Tensor, torch.Tensor],
        meta: AttentionMetadata,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The residual stream is ``x + residual`` (``x`` alone on the first layer); each add
        is fused into the next norm. Returns (x, residual)."""
        h, residual = _enter(self._norm("pre_attn"), x, residual)
        x = self.self_attn(positions, h, cos_sin, kv_cache, meta)
        x = self._finish(self._norm("post_attn"), x)
        h, residual = _enter(self._norm("pre_mlp"), x, residual)
        m = self.mlp(h)  # [T, H]; under tensor parallel, this rank's columns only
        if self.comm is not None:
            m = self.comm.all_reduce(m)
        x = self._finish(self._norm("post_mlp"), m)
        return x, residual

    def _finish(self, norm: Norm | None, x: torch.Tensor) -> torch.Tensor:
        """A sublayer's output before it joins the stream: post-norm, Granite's multiplier."""
        if norm is not None:
            x = norm(x)
        if self.residual_multiplier != 1.0:
            x = x * self.residual_multiplier
        return x


class ParallelDecoderLayer(DecoderLayer):
    """Cohere's and Phi's block: ``x + attn(norm(x)) + mlp(norm(x))``, one norm for both;
    GPT-NeoX's: ``x + attn(norm1(x)) + mlp(norm2(x))``."""

    def forward(
        self,
        positions: torch.Tensor,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        cos_sin: torch.Tensor,
        kv_cache: tuple[torch.Tensor, torch.Tensor],
        meta: AttentionMetadata,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        h, residual = _enter(self._norm("pre_attn"), x, residual)
        a = self.self_attn(positions, h, cos_sin, kv_cache, meta)  # [T, H]
        mlp_norm = self._norm("pre_mlp")  # GPT-NeoX's own norm, from the same input
        m = self.mlp(h if mlp_norm is None else mlp_norm(residual))  # [T, H]
        # (under tensor parallel, this rank's columns only)
        if self.comm is not None:
            m = self.comm.all_reduce(m)
        return a + m, residual


class PostNormDecoderLayer(DecoderLayer):
    """OPT-350m's block (``do_layer_norm_before`` false): ``x = norm1(x + attn(x))``, then
    ``x = norm2(x + mlp(x))``. The stream leaves normed, so no residual is carried on:
    returns (x, None)."""

    def forward(
        self,
        positions: torch.Tensor,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        cos_sin: torch.Tensor,
        kv_cache: tuple[torch.Tensor, torch.Tensor],
        meta: AttentionMetadata,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        post_attn, post_mlp = self._norm("post_attn"), self._norm("post_mlp")
        assert post_attn is not None and post_mlp is not None
        h = x if residual is None else x + residual  # [T, H]
        a = self.self_attn(positions, h, cos_sin, kv_cache, meta)
        h, _ = post_attn.forward_residual(a, h)
        m = self.mlp(h)  # [T, H]; under tensor parallel, this rank's columns only
        if self.comm is not None:
            m = self.comm.all_reduce(m)
        h, _ = post_mlp.forward_residual(m, h)
        return h, None


# The layer class of the norm layouts whose block is not DecoderLayer's.
_LAYERS: dict[str, type[DecoderLayer]] = {
    "parallel": ParallelDecoderLayer,
    "parallel2": ParallelDecoderLayer,
    "opt_post": PostNormDecoderLayer,
}


def layer_class(cfg: CheckpointConfig) -> type[DecoderLayer]:
    """The block class of ``cfg``'s norm layout."""
    return _LAYERS.get(cfg.norm_layout, DecoderLayer)
