"""The Llama decoder family: Llama 2/3/3.x, Mistral, Qwen2 (q/k/v bias), Qwen3 (q/k norm).

These families differ only in switches read from :class:`ModelConfig` (bias on the QKV
projection, per-head RMSNorm on q and k, sliding windows, head_dim, tied embeddings), so
one module serves them all. Projections are fused: ``qkv_proj`` packs q|k|v rows and
``gate_up_proj`` packs gate|up rows; :data:`PACKED_MODULES` tells the loader how HF's
separate tensors map onto them.

The batch is flat: ``forward(input_ids [T], positions [T], meta, kv_caches) -> [T, H]``;
``compute_logits`` then runs the LM head only on the rows that need logits.
"""

from __future__ import annotations

import torch
from torch import nn

from actorllm.kernels.ops import Ops
from actorllm.kernels.rotary import build_cos_sin_cache, rope_inv_freq
from actorllm.models.attention import AttentionMetadata, PagedAttention
from actorllm.models.config import ModelConfig

# HF tensor name fragment -> (our packed param fragment, shard index).
PACKED_MODULES: dict[str, tuple[str, int]] = {
    "q_proj": ("qkv_proj", 0),
    "k_proj": ("qkv_proj", 1),
    "v_proj": ("qkv_proj", 2),
    "gate_proj": ("gate_up_proj", 0),
    "up_proj": ("gate_up_proj", 1),
}

KVCaches = list[tuple[torch.Tensor, torch.Tensor]]


class RMSNorm(nn.Module):
    def __init__(self, ops: Ops, size: int, eps: float) -> None:
        super().__init__()
        self.ops = ops
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ops.rms_norm(x, self.weight, self.eps)

    def forward_residual(
        self, x: torch.Tensor, residual: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(rms_norm(x + residual), x + residual)."""
        return self.ops.fused_add_rms_norm(x, residual, self.weight, self.eps)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, ops: Ops, layer_idx: int) -> None:
        super().__init__()
        self.ops = ops
        self.hq, self.hk, self.d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        # Shard sizes of the packed projection, in PACKED_MODULES order (q, k, v).
        self.shard_sizes = [self.hq * self.d, self.hk * self.d, self.hk * self.d]
        self.qkv_proj = nn.Linear(cfg.hidden_size, sum(self.shard_sizes), bias=cfg.attention_bias)
        self.o_proj = nn.Linear(self.hq * self.d, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(ops, self.d, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(ops, self.d, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.attn = PagedAttention(ops, self.hq, self.hk, self.d, cfg.sliding_windows[layer_idx])

    def forward(
        self,
        positions: torch.Tensor,
        x: torch.Tensor,
        cos_sin: torch.Tensor,
        kv_cache: tuple[torch.Tensor, torch.Tensor],
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        t = x.shape[0]
        q, k, v = self.qkv_proj(x).split(self.shard_sizes, dim=-1)
        q = q.view(t, self.hq, self.d)  # [T, Hq, D]
        k = k.view(t, self.hk, self.d)  # [T, Hk, D]
        v = v.view(t, self.hk, self.d)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = self.ops.apply_rotary(positions, q, k, cos_sin)
        o = self.attn(q, k, v, kv_cache, meta)  # [T, Hq, D]
        return self.o_proj(o.reshape(t, self.hq * self.d))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig, ops: Ops) -> None:
        super().__init__()
        self.ops = ops
        self.shard_sizes = [cfg.intermediate_size, cfg.intermediate_size]
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.ops.silu_and_mul(self.gate_up_proj(x)))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, ops: Ops, layer_idx: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(ops, cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, ops, layer_idx)
        self.post_attention_layernorm = RMSNorm(ops, cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg, ops)

    def forward(
        self,
        positions: torch.Tensor,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        cos_sin: torch.Tensor,
        kv_cache: tuple[torch.Tensor, torch.Tensor],
        meta: AttentionMetadata,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Pre-norm block; the residual add is fused into the next norm. Returns (x, residual)."""
        if residual is None:
            residual = x
            x = self.input_layernorm(x)
        else:
            x, residual = self.input_layernorm.forward_residual(x, residual)
        x = self.self_attn(positions, x, cos_sin, kv_cache, meta)
        x, residual = self.post_attention_layernorm.forward_residual(x, residual)
        return self.mlp(x), residual


class DecoderModel(nn.Module):
    def __init__(self, cfg: ModelConfig, ops: Ops) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, ops, i) for i in range(cfg.num_layers))
        self.norm = RMSNorm(ops, cfg.hidden_size, cfg.rms_norm_eps)


class LlamaForCausalLM(nn.Module):
    """Llama-family causal LM over a flat token batch with a paged KV cache.

    Build it anywhere (the loader builds it on the ``meta`` device), then call
    :meth:`init_rotary` on the real device before the first forward.
    """

    packed_modules = PACKED_MODULES

    def __init__(self, cfg: ModelConfig, ops: Ops) -> None:
        super().__init__()
        self.config = cfg
        self.ops = ops
        self.model = DecoderModel(cfg, ops)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        # [max_positions, D] cos | sin, float32; filled by init_rotary on the real device.
        self.cos_sin_cache = torch.empty(0)

    def init_rotary(self, device: torch.device | str, max_positions: int | None = None) -> None:
        """Build the RoPE table for positions ``[0, max_positions)`` on ``device``."""
        cfg = self.config
        n = max(max_positions or 0, cfg.max_position_embeddings)
        inv_freq = rope_inv_freq(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling)
        self.cos_sin_cache = build_cos_sin_cache(n, inv_freq).to(device)

    def tie_weights(self) -> None:
        """Share the LM head with the embedding again (after weights were replaced)."""
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        attn_metadata: AttentionMetadata,
        kv_caches: KVCaches,
    ) -> torch.Tensor:
        """input_ids, positions: [T] int64 -> hidden states [T, H] (final norm applied)."""
        x = self.model.embed_tokens(input_ids)  # [T, H]
        residual: torch.Tensor | None = None
        for layer, kv_cache in zip(self.model.layers, kv_caches, strict=True):
            x, residual = layer(positions, x, residual, self.cos_sin_cache, kv_cache, attn_metadata)
        assert residual is not None
        x, _ = self.model.norm.forward_residual(x, residual)
        return x

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [N, H] -> logits [N, V] float32."""
        return self.lm_head(hidden).float()
