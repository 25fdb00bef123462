"""MoE experts held as one module each (children ``"0"`` .. ``"E-1"``, each with a fused
``gate_up_proj`` and a ``down_proj``), for weights only their own linear classes can read:
quantized checkpoints (``models/quant/experts.py``) and GGUF files
(``models/gguf/experts.py``). Each active expert's rows go through its two linears."""

from __future__ import annotations

import torch
from torch import nn

from actorllm.kernels.moe import gated_activation, run_experts


class ExpertModules(nn.Module):
    """Subclasses add the experts (``add_module(str(e), ...)``) and set ``num_experts``."""

    num_experts: int

    def expert(self, e: int) -> nn.Module:
        return self.get_submodule(str(e))

    def forward(
        self,
        x: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        activation: str = "silu",
    ) -> torch.Tensor:
        """sum_k topk_weights[t, k] * expert_{topk_ids[t, k]}(x[t]): ``x [T, H]``,
        ``topk_weights [T, K]`` float32, ``topk_ids [T, K]`` -> ``[T, H]`` in x's dtype."""
        act = gated_activation(activation)

        def expert(e: int, xe: torch.Tensor, ye: torch.Tensor) -> None:
            linears = self.expert(e)
            gate_up, down = (
                linears.get_submodule("gate_up_proj"),
                linears.get_submodule("down_proj"),
            )
            ye.copy_(down(act(gate_up(xe))))  # [n, 2I] -> [n, I] -> [n, H]

        return run_experts(x, topk_weights, topk_ids, self.num_experts, expert)
