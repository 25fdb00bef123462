"""The sparse Mixture-of-Experts MLP: Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, gpt-oss, PhiMoE.

A router (``gate``: [E, H]) scores every expert per token, the top ``K`` are kept (softmax
then top-k, renormalised where the family says so; ``kernels/moe.py::route_topk``; PhiMoE:
its sparsemixer's two, ``route_sparsemixer``) and
the experts run as one fused grouped GEMM (``ops.fused_moe``). Qwen2-MoE adds a shared
expert every token goes through, scaled by ``sigmoid(shared_expert_gate(x))``.

Expert weights are stacked at load time into ``experts.w13`` [E, 2I, H] (gate | up) and
``experts.w2`` [E, H, I]. :data:`EXPERT_SLOTS` maps each HF per-expert tensor name onto
its slot: ``mlp.experts.{e}.gate_proj.weight`` (Mixtral: ``w1``) is rows [0, I) of
``w13[e]``, ``up_proj`` (``w3``) rows [I, 2I), ``down_proj`` (``w2``) all of ``w2[e]``.
transformers 5's own stacked names (``experts.gate_up_proj``, ``experts.down_proj``) load
whole. A quantized checkpoint's experts are not stacked: ``models/quant/experts.py``.
gpt-oss adds a bias to the router and to both expert projections (``w13_bias`` [E, 2I],
``w2_bias`` [E, H]) and its clamped SwiGLU; its checkpoints' own expert layout is read by
``models/gpt_oss.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from actorllm.kernels.moe import route_sparsemixer, route_topk
from actorllm.kernels.ops import Ops
from actorllm.models.config import CheckpointConfig
from actorllm.models.layers import MLP
from actorllm.models.quant.mxfp4 import Mxfp4Experts

if TYPE_CHECKING:
    from actorllm.models.routed_capture import RoutingRecorder

# HF per-expert projection -> (our stacked parameter, slot within the expert).
EXPERT_SLOTS: dict[str, tuple[str, int]] = {
    "gate_proj": ("w13", 0),
    "up_proj": ("w13", 1),
    "down_proj": ("w2", 0),
    "w1": ("w13", 0),
    "w3": ("w13", 1),
    "w2": ("w2", 0),
}
# transformers 5's stacked tensor names -> ours.
STACKED_NAMES: dict[str, str] = {
    "gate_up_proj": "w13",
    "down_proj": "w2",
    "gate_up_proj_bias": "w13_bias",  # gpt-oss
    "down_proj_bias": "w2_bias",
}


class FusedExperts(nn.Module):
    """E gated-MLP experts stacked into two tensors."""

    def __init__(self, num_experts: int, hidden: int, inter: int, bias: bool = False) -> None:
        super().__init__()
        self.num_experts = num_experts
        self.inter = inter
        self.w13 = nn.Parameter(torch.empty(num_experts, 2 * inter, hidden))  # [E, 2I, H]
        self.w2 = nn.Parameter(torch.empty(num_experts, hidden, inter))  # [E, H, I]
        # gpt-oss: [E, 2I] (gate | up) and [E, H]
        self.w13_bias = nn.Parameter(torch.empty(num_experts, 2 * inter)) if bias else None
        self.w2_bias = nn.Parameter(torch.empty(num_experts, hidden)) if bias else None

    def shard_view(self, leaf: str, data: torch.Tensor, key: tuple[int, int]) -> torch.Tensor:
        """The rows of ``data`` (our ``leaf`` parameter) that expert ``key[0]``'s slot
        ``key[1]`` owns."""
        expert, slot = key
        if leaf == "w13":
            return data[expert].narrow(0, slot * self.inter, self.inter)  # [I, H]
        return data[expert]  # [H, I]

    def shard_keys(self, leaf: str) -> list[tuple[int, int]]:
        slots = (0, 1) if leaf == "w13" else (0,)
        return [(e, s) for e in range(self.num_experts) for s in slots]


class SparseMoeBlock(nn.Module):
    def __init__(self, cfg: CheckpointConfig, ops: Ops) -> None:
        super().__init__()
        self.ops = ops
        self.top_k = cfg.num_experts_per_tok
        self.renormalize = cfg.norm_topk_prob
        self.sparsemixer_eps = cfg.sparsemixer_eps  # PhiMoE's routing (None: top-k)
        self.activation = cfg.hidden_act
        # Keywords fused_moe takes only for the families that need them (like softcap).
        self.act_args: dict[str, float] = {}
        if cfg.hidden_act == "swigluoai":
            self.act_args = {"swiglu_limit": cfg.swiglu_limit, "swiglu_alpha": cfg.swiglu_alpha}
        self.gate = nn.Linear(cfg.hidden_size, cfg.num_experts, bias=cfg.moe_bias)  # the router
        # Replaced at load by Mxfp4Experts (an mxfp4 checkpoint) or by
        # models/quant/experts.py's QuantExperts (other quantized checkpoints).
        self.experts: nn.Module = FusedExperts(
            cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size, cfg.moe_bias
        )
        self.shared_expert: MLP | None = None
        self.shared_expert_gate: nn.Linear | None = None
        if cfg.shared_expert_intermediate_size:
            self.shared_expert = MLP(cfg, ops, cfg.shared_expert_intermediate_size)
            self.shared_expert_gate = nn.Linear(cfg.hidden_size, 1, bias=False)
        # --enable-return-routed-experts: records ids per forward (models/routed_capture.py).
        self.recorder: RoutingRecorder | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        logits = self.gate(x)  # [T, E]
        if self.sparsemixer_eps is not None:
            weights, ids = route_sparsemixer(logits, self.sparsemixer_eps)  # [T, 2] x2
        else:
            weights, ids = route_topk(logits, self.top_k, self.renormalize)  # [T, K] x2
        if self.recorder is not None:
            self.recorder.record(ids)
        ex = self.experts
        if isinstance(ex, Mxfp4Experts):  # packed: dequantized per routed expert
            return self._add_shared(x, ex(x, weights, ids, self.activation, **self.act_args))
        if not isinstance(ex, FusedExperts):  # quantized: each expert's own packed linears
            return self._add_shared(x, ex(x, weights, ids, self.activation))  # [T, H]
        bias = {} if ex.w13_bias is None else {"w13_bias": ex.w13_bias, "w2_bias": ex.w2_bias}
        out = self.ops.fused_moe(
            x, ex.w13, ex.w2, weights, ids, self.activation, **bias, **self.act_args
        )  # [T, H]
        return self._add_shared(x, out)

    def _add_shared(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        if self.shared_expert is not None and self.shared_expert_gate is not None:
            shared = self.shared_expert(x)  # [T, H]
            out = out + torch.sigmoid(self.shared_expert_gate(x)) * shared
        return out
