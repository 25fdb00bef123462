"""GPT-2: learned absolute positions, LayerNorm with bias, biased projections, GELU MLP.

HF stores GPT-2's projections as ``Conv1D`` modules whose weight is [in, out] (the
transpose of ``nn.Linear``'s [out, in]); :meth:`GPT2LMHeadModel.checkpoint_tensor`
transposes them once at load. ``c_attn`` already packs q|k|v. Checkpoint names come with
or without the ``transformer.`` prefix and are mapped onto ours::

    transformer.wte  -> model.embed_tokens       transformer.h.{i} -> model.layers.{i}
    transformer.wpe  -> model.embed_positions    transformer.ln_f  -> model.norm

The LM head is tied to ``wte``. Old checkpoints carry the causal-mask buffers
``attn.bias`` / ``attn.masked_bias``; they are skipped.
"""

from __future__ import annotations

import re

import torch
import torch.nn.functional as F
from torch import nn

from actorllm.kernels.ops import Ops
from actorllm.models.attention import AttentionMetadata, PagedAttention
from actorllm.models.base import CausalLM, KVCaches
from actorllm.models.config import CheckpointConfig

_CONV1D = re.compile(r"\.(c_attn|c_proj|c_fc)\.weight$")
_RENAMES = (
    (re.compile(r"^wte\."), "model.embed_tokens."),
    (re.compile(r"^wpe\."), "model.embed_positions."),
    (re.compile(r"^h\.(\d+)\."), r"model.layers.\1."),
    (re.compile(r"^ln_f\."), "model.norm."),
)


def _activation(name: str) -> str:
    """F.gelu's ``approximate`` for GPT-2's activation_function; others are refused."""
    if name in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        return "tanh"
    if name == "gelu":
        return "none"
    raise ValueError(f"unsupported GPT-2 activation_function {name!r} (supported: gelu, gelu_new)")


class GPT2Attention(nn.Module):
    def __init__(self, cfg: CheckpointConfig, ops: Ops, layer_idx: int) -> None:
        super().__init__()
        self.h, self.d = cfg.num_heads, cfg.head_dim
        hidden = cfg.hidden_size
        self.c_attn = nn.Linear(hidden, 3 * hidden)  # q | k | v
        self.c_proj = nn.Linear(hidden, hidden)
        self.attn = PagedAttention(ops, self.h, self.h, self.d, cfg.sliding_windows[layer_idx])

    def forward(
        self, x: torch.Tensor, kv_cache: tuple[torch.Tensor, torch.Tensor], meta: AttentionMetadata
    ) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        t = x.shape[0]
        q, k, v = self.c_attn(x).view(t, 3, self.h, self.d).unbind(1)  # 3 x [T, Hq, D]
        o = self.attn(q, k, v, kv_cache, meta)  # [T, Hq, D]
        return self.c_proj(o.reshape(t, self.h * self.d))


class GPT2MLP(nn.Module):
    def __init__(self, cfg: CheckpointConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.c_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.approximate = _activation(cfg.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate=self.approximate))  # [T, H]


class GPT2Block(nn.Module):
    def __init__(self, cfg: CheckpointConfig, ops: Ops, layer_idx: int) -> None:
        super().__init__()
        eps = cfg.rms_norm_eps  # config.py reads layer_norm_epsilon into it for GPT-2
        self.ln_1 = nn.LayerNorm(cfg.hidden_size, eps=eps)
        self.attn = GPT2Attention(cfg, ops, layer_idx)
        self.ln_2 = nn.LayerNorm(cfg.hidden_size, eps=eps)
        self.mlp = GPT2MLP(cfg)

    def forward(
        self, x: torch.Tensor, kv_cache: tuple[torch.Tensor, torch.Tensor], meta: AttentionMetadata
    ) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), kv_cache, meta)
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, cfg: CheckpointConfig, ops: Ops) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.embed_positions = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.layers = nn.ModuleList(GPT2Block(cfg, ops, i) for i in range(cfg.num_layers))
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)


class GPT2LMHeadModel(CausalLM):
    def __init__(self, cfg: CheckpointConfig, ops: Ops) -> None:
        super().__init__()
        self.config = cfg
        self.model = GPT2Model(cfg, ops)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.tie_weights()

    def init_rotary(self, device: torch.device | str, max_positions: int | None = None) -> None:
        """Nothing to build (positions are learned); refuses positions past the table."""
        if max_positions is not None and max_positions > self.config.max_position_embeddings:
            raise ValueError(
                f"GPT-2 has learned positions for {self.config.max_position_embeddings} "
                f"tokens; cannot serve {max_positions}"
            )

    def input_embeddings(self) -> nn.Embedding:
        return self.model.embed_tokens

    def checkpoint_name(self, name: str) -> str | None:
        name = name.removeprefix("transformer.")
        if name.endswith((".attn.bias", ".attn.masked_bias")):
            return None  # causal-mask buffers, not weights
        for pattern, repl in _RENAMES:
            name = pattern.sub(repl, name)
        return name

    def checkpoint_tensor(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.t() if _CONV1D.search(name) else tensor  # Conv1D [in, out] -> [out, in]

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        attn_metadata: AttentionMetadata,
        kv_caches: KVCaches,
    ) -> torch.Tensor:
        """input_ids, positions: [T] int64 -> hidden states [T, H] (ln_f applied)."""
        x = self.model.embed_tokens(input_ids) + self.model.embed_positions(positions)  # [T, H]
        for layer, kv_cache in zip(self.model.layers, kv_caches, strict=True):
            x = layer(x, kv_cache, attn_metadata)
        return self.model.norm(x)

    def compute_logits(self, hidden: torch.Tensor, float32: bool = True) -> torch.Tensor:
        logits = self.lm_head(hidden)  # [N, V]
        return logits.float() if float32 else logits
