"""GGUF MoE experts: each expert a pair of :class:`GGUFLinear` over its own rows of the
file's 3-D expert tensors, kept in their blocks, run on the tokens routed to it.

llama.cpp stores a layer's experts stacked: ``blk.N.ffn_gate_exps.weight`` /
``ffn_up_exps`` ``[E, I, H]`` and ``ffn_down_exps`` ``[E, H, I]`` (row-major, each row a
run of GGML blocks, so expert ``e`` is the ``e``-th slab of whole rows). Expert ``e`` is
built as ``{e}.gate_up_proj`` (its gate rows then its up rows, as the dense MLP fuses
them) and ``{e}.down_proj``; the forward groups the (token, expert) pairs by expert
(``kernels/moe.py::run_experts``) and runs each active expert through the same linear
forward the dense GGUF layers use. The router (``ffn_gate_inp``) stays a float linear.
"""

from __future__ import annotations

from torch import nn

from actorllm.models.expert_modules import ExpertModules
from actorllm.models.gguf.linear import GGUFLinear


class GGUFExpert(nn.Module):
    """One gated-MLP expert: ``down(act(gate(x)) * up(x))``, ``[n, H] -> [n, H]``."""

    def __init__(self, hidden: int, inter: int, name: str) -> None:
        super().__init__()
        self.gate_up_proj = GGUFLinear(hidden, 2 * inter, f"{name}.gate_up_proj")
        self.down_proj = GGUFLinear(inter, hidden, f"{name}.down_proj")


class GGUFExperts(ExpertModules):
    """E experts, children ``"0"`` .. ``"E-1"`` (the file's slab order)."""

    # Its forward slices each expert's rows on the host (no CUDA-graph capture).
    host_sync = True

    def __init__(self, num_experts: int, hidden: int, inter: int, name: str) -> None:
        super().__init__()
        self.num_experts, self.hidden, self.inter = num_experts, hidden, inter
        for e in range(num_experts):
            self.add_module(str(e), GGUFExpert(hidden, inter, f"{name}.{e}"))

    def expert(self, e: int) -> GGUFExpert:
        module = super().expert(e)
        assert isinstance(module, GGUFExpert)
        return module
