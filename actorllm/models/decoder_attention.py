"""The shared decoder's attention (``models/llama.py``): the packed ``qkv_proj`` (q | k | v
rows, or GPT-NeoX's head by head, Falcon's KV group by KV group), optional q/k norms
(RMSNorm per head or over the whole projection, or a LayerNorm per head), OLMoE's clip,
RoPE on all, part or none of each head (NeoX halves or GPT-J's adjacent pairs), paged
attention, ``o_proj``.
"""

from __future__ import annotations

import torch
from torch import nn

from actorllm.kernels.ops import Ops
from actorllm.kernels.rotary import apply_rotary_interleaved
from actorllm.models.attention import AttentionMetadata, PagedAttention
from actorllm.models.config import CheckpointConfig
from actorllm.models.layers import RMSNorm
from actorllm.models.parallel import TPComm
from actorllm.models.qk_layer_norm import QKLayerNorm


class Attention(nn.Module):
    def __init__(self, cfg: CheckpointConfig, ops: Ops, layer_idx: int) -> None:
        super().__init__()
        self.ops = ops
        self.hq, self.hk, self.d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        # Shard sizes of the packed projection, in PACKED_MODULES order (q, k, v).
        self.shard_sizes = [self.hq * self.d, self.hk * self.d, self.hk * self.d]
        self.qkv_proj = nn.Linear(cfg.hidden_size, sum(self.shard_sizes), bias=cfg.attention_bias)
        # GPT-NeoX: rows [Hq, 3, D], not q | k | v; Falcon's new architecture the same per
        # KV group: [Hk, Hq / Hk + 2, D].
        self.head_major = cfg.qkv_head_major
        self.o_proj = nn.Linear(self.hq * self.d, cfg.hidden_size, bias=cfg.o_proj_bias)
        # Per head ([D], Qwen3 / Gemma 3) or over the whole projection ([Hq*D], OLMo 2).
        self.per_head = cfg.qk_norm_per_head
        q_size, k_size = (self.d, self.d) if self.per_head else self.shard_sizes[:2]
        eps, off = cfg.rms_norm_eps, cfg.norm_offset
        self.q_norm: RMSNorm | QKLayerNorm | None = None
        self.k_norm: RMSNorm | QKLayerNorm | None = None
        if cfg.qk_norm and cfg.qk_norm_kind != "rms":  # Phi, Cohere, StableLM: per head
            self.q_norm = QKLayerNorm(cfg.qk_norm_kind, self.hq, self.d, eps)
            self.k_norm = QKLayerNorm(cfg.qk_norm_kind, self.hk, self.d, eps)
        elif cfg.qk_norm:
            self.q_norm = RMSNorm(ops, q_size, eps, off)
            self.k_norm = RMSNorm(ops, k_size, eps, off)
        self.clip = cfg.clip_qkv
        nope = bool(cfg.nope_layers) and cfg.nope_layers[layer_idx]  # SmolLM3, EXAONE 4
        self.rot_dim = 0 if nope else int(self.d * cfg.partial_rotary_factor)
        # NeoX halves (the backend's kernel) or GPT-J's adjacent pairs (ERNIE 4.5, GLM).
        self.rotary = apply_rotary_interleaved if cfg.rope_interleaved else ops.apply_rotary
        # Qwen3: per-head norms without Gemma's offset and full NeoX rotary: the backend's
        # one fused call where it has one (the three calls below otherwise).
        self.fused_qk = (
            ops.qk_norm_rotary is not None and cfg.qk_norm and self.per_head
            and not off and self.rot_dim == self.d and not cfg.rope_interleaved
            and cfg.qk_norm_kind == "rms"
        )  # fmt: skip
        self.comm: TPComm | None = None  # tensor parallel: sums the ranks' o_proj outputs
        window = cfg.sliding_windows[layer_idx]
        self.attn = PagedAttention(
            ops, self.hq, self.hk, self.d, window,
            scale=cfg.attention_scale, softcap=cfg.attn_logit_softcap,
        )  # fmt: skip
        # gpt-oss: each query head's sink logit [Hq] (the kernels read it as float32).
        self.sinks = nn.Parameter(torch.empty(self.hq)) if cfg.attention_sinks else None

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
        if self.head_major:  # [T, Hk, Hq / Hk + 2, D]: each KV group's q heads, k, v
            qkv = self.qkv_proj(x).view(t, self.hk, -1, self.d)
            q = qkv[:, :, :-2].reshape(t, -1)  # [T, Hq * D], query head h in group h // G
            k, v = qkv[:, :, -2].reshape(t, -1), qkv[:, :, -1].reshape(t, -1)  # [T, Hk * D]
        else:
            q, k, v = self.qkv_proj(x).split(self.shard_sizes, dim=-1)
        if self.q_norm is not None and self.k_norm is not None and not self.per_head:
            q, k = self.q_norm(q), self.k_norm(k)  # over [Hq*D] and [Hk*D]
        if self.clip is not None:  # OLMoE: after the norms
            c = self.clip
            q, k, v = q.clamp(-c, c), k.clamp(-c, c), v.clamp(-c, c)
        q = q.view(t, self.hq, self.d)  # [T, Hq, D]
        k = k.view(t, self.hk, self.d)  # [T, Hk, D]
        v = v.view(t, self.hk, self.d)
        if self.fused_qk:  # Qwen3: both per-head norms and the rotary in one call
            assert isinstance(self.q_norm, RMSNorm) and isinstance(self.k_norm, RMSNorm)
            assert self.ops.qk_norm_rotary is not None
            qw, kw, eps = self.q_norm.weight, self.k_norm.weight, self.q_norm.eps
            q, k = self.ops.qk_norm_rotary(positions, q, k, qw, kw, eps, cos_sin)
        else:
            if self.q_norm is not None and self.k_norm is not None and self.per_head:
                q, k = self.q_norm(q), self.k_norm(k)
            q, k = self._rotate(positions, q, k, cos_sin)
        o = self.attn(q, k, v, kv_cache, meta, self.sinks)  # [T, Hq, D]
        out = self.o_proj(o.reshape(t, self.hq * self.d))  # [T, H], this rank's heads only
        return out if self.comm is None else self.comm.all_reduce(out)

    def _rotate(
        self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """RoPE on q [T, Hq, D] and k [T, Hk, D]: all of each head, its first rot_dim, or
        none of it (a NoPE layer)."""
        if self.rot_dim == self.d:
            return self.rotary(positions, q, k, cos_sin)
        r = self.rot_dim  # partial rotary: only the first rot_dim lanes of each head turn
        if r == 0:
            return q, k
        qr, kr = self.rotary(positions, q[..., :r], k[..., :r], cos_sin)
        return torch.cat([qr, q[..., r:]], dim=-1), torch.cat([kr, k[..., r:]], dim=-1)
