"""Quantized MoE experts: each expert a pair of the quantized linears the dense layers use
(``linear.py``), kept packed, run on the tokens routed to it.

Quantized MoE checkpoints (GPTQ / AWQ Mixtral and Qwen3-MoE, compressed-tensors from
llm-compressor, fp8 Qwen3-MoE) store every expert under the dense names:
``model.layers.0.mlp.experts.3.gate_proj.qweight`` / ``.scales`` / ``.qzeros`` /
``.g_idx`` (Mixtral: ``block_sparse_moe.experts.3.w1`` / ``w3`` / ``w2``). Expert ``e`` is
built as ``experts.{e}.gate_up_proj`` (gate | up fused, as the dense MLP's: the
checkpoint's gate and up tensors fill its two output shards) and ``experts.{e}.down_proj``,
so the loader writes each tensor through the linear's own ``shard_view`` and
``finish_loading`` repacks it like any dense quantized linear. Under tensor parallelism
each rank builds every expert with its ``moe_intermediate_size / N`` columns: gate/up
split by output rows, down by input columns (``models/parallel.py`` cuts the checkpoint's
per-expert tensors as it cuts the dense ones; a split that is not whole groups, blocks or
packed words is refused by ``shards.py``'s rules, naming expert 0's layer).

The forward groups the ``T * K`` (token, expert) pairs by expert, as the unquantized
reference does (``kernels/moe.py::fused_moe``), and runs each active expert's rows through
its two linears: the low-bit compute is the dense path's (native kernels for up to 16 rows,
per-tile dequantization above; int8 GEMMs for W8A8). The router (``gate``) and Qwen2-MoE's
``shared_expert_gate`` stay unquantized, as in vLLM; the shared expert is an ordinary
dense MLP, quantized like any other.
"""

from __future__ import annotations

import torch
from torch import nn

from actorllm.models.expert_modules import ExpertModules
from actorllm.models.quant.linear import QuantLinear, quant_linear
from actorllm.models.quant.spec import QuantSpec

# An HF per-expert projection -> (our linear in the expert, its output shard; None: whole).
EXPERT_LINEARS: dict[str, tuple[str, int | None]] = {
    "gate_proj": ("gate_up_proj", 0),
    "up_proj": ("gate_up_proj", 1),
    "down_proj": ("down_proj", None),
    "w1": ("gate_up_proj", 0),  # Mixtral
    "w3": ("gate_up_proj", 1),
    "w2": ("down_proj", None),
}


class QuantExpert(nn.Module):
    """One gated-MLP expert: ``down(act(gate(x)) * up(x))``, ``[n, H] -> [n, H]``."""

    def __init__(
        self,
        hidden: int,
        inter: int,
        spec: QuantSpec,
        dtype: torch.dtype,
        row_shard: tuple[int, int] | None = None,
    ) -> None:
        """``inter``: this rank's columns; ``row_shard``: (rank, ranks) of ``down_proj``'s
        input split under tensor parallelism (see :func:`quant_linear`)."""
        super().__init__()
        self.shard_sizes = [inter, inter]
        self.gate_up_proj: QuantLinear = quant_linear(
            spec, hidden, 2 * inter, False, dtype, [inter, inter]
        )
        self.down_proj: QuantLinear = quant_linear(
            spec, inter, hidden, False, dtype, None, row_shard
        )


class QuantExperts(ExpertModules):
    """E quantized experts, children ``"0"`` .. ``"E-1"`` (the checkpoint's numbering)."""

    def __init__(
        self,
        num_experts: int,
        hidden: int,
        inter: int,
        spec: QuantSpec,
        dtype: torch.dtype,
        row_shard: tuple[int, int] | None = None,
    ) -> None:
        super().__init__()
        self.num_experts, self.inter = num_experts, inter
        for e in range(num_experts):
            self.add_module(str(e), QuantExpert(hidden, inter, spec, dtype, row_shard))

    def expert(self, e: int) -> QuantExpert:
        module = super().expert(e)
        assert isinstance(module, QuantExpert)
        return module


def quantized_experts(model: nn.Module) -> bool:
    """Whether ``model`` holds quantized MoE experts (these, or GGUF's ``host_sync``
    experts: their forward syncs with the host, so decode is not captured in CUDA graphs)."""
    return any(
        isinstance(m, QuantExperts) or getattr(m, "host_sync", False) for m in model.modules()
    )
