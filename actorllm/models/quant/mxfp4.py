"""MXFP4 MoE experts: gpt-oss's checkpoints (``quantization_config: {"quant_method":
"mxfp4"}``) store every expert weight as OCP microscaling FP4 and everything else (attention,
router, embeddings, head) in bf16; so does this module: only the experts are quantized.

On disk, per projection (transformers' ``integrations/mxfp4.py`` reads the same):

* ``{proj}_blocks`` uint8 [E, rows, cols / 32, 16]: two FP4 (e2m1) codes a byte, the low
  nibble first (even column), codes 0..15 -> ``FP4_VALUES``;
* ``{proj}_scales`` uint8 [E, rows, cols / 32]: one power-of-two scale per 32 values, an
  e8m0 exponent biased by 127: value = FP4_VALUES[code] * 2 ** (scale - 127).

``gate_up_proj``'s rows are the 2I outputs (gate and up interleaved, which the loader
splits into gate rows then up rows, still packed), ``down_proj``'s the H outputs: the same
[E, out, in] as our ``w13`` / ``w2``. The experts stay packed in memory (4.25 bits a
weight: 4 for the code, 8 per 32 for the scale); each forward dequantizes only the experts
its tokens route to, one at a time and ``TILE_ROWS`` output rows at a time, into the
activations' dtype, and multiplies as it goes (the torch reference ``fused_moe``'s math).

    >>> blocks = torch.tensor([[0x21, 0xF9] + [0] * 14], dtype=torch.uint8)  # [1, 16]
    >>> dequantize_mxfp4(blocks, torch.tensor([128], dtype=torch.uint8), torch.float32)[:4].tolist()
    [1.0, 2.0, -1.0, -12.0]
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from actorllm.kernels.moe import gated_activation, run_experts
from actorllm.models.meta_init import on_meta

# e2m1 codes 0..15 (sign in bit 3).
FP4_VALUES = (
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
)  # fmt: skip
BLOCK = 32  # values per scale
SCALE_BIAS = 127
# Output rows of an expert weight dequantized at a time: the float copy a forward holds
# stays ~TILE_ROWS x in (gpt-oss-120b: 1.5 MB in float32), not the whole expert (66 MB).
TILE_ROWS = 128


def dequantize_mxfp4(
    blocks: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    """blocks [..., G, 16] uint8, scales [..., G] uint8 -> [..., G * 32] in ``dtype``
    (exact: a code times a power of two fits any float type in range)."""
    lut = torch.tensor(FP4_VALUES, dtype=torch.float32, device=blocks.device)
    codes = torch.stack([blocks & 0x0F, blocks >> 4], dim=-1).int()  # [..., G, 16, 2]
    values = lut[codes].flatten(-2)  # [..., G, 32]: low nibble first
    exp = scales.to(torch.int32) - SCALE_BIAS  # [..., G]
    return torch.ldexp(values, exp.unsqueeze(-1)).flatten(-2).to(dtype)  # [..., G * 32]


class Mxfp4Experts(nn.Module):
    """E gated-MLP experts (gpt-oss: with biases) whose weights stay MXFP4-packed; the
    drop-in for ``models/moe.py``'s ``FusedExperts`` when the checkpoint is mxfp4."""

    def __init__(self, num_experts: int, hidden: int, inter: int, dtype: torch.dtype) -> None:
        super().__init__()
        for name, size in (("hidden_size", hidden), ("intermediate_size", inter)):
            if size % BLOCK:
                raise ValueError(f"mxfp4 experts: {name} {size} is not a multiple of {BLOCK}")
        self.num_experts = num_experts
        self.inter = inter

        def packed(*shape: int) -> nn.Parameter:
            return nn.Parameter(torch.empty(*shape, dtype=torch.uint8), requires_grad=False)

        e = num_experts
        self.w13_blocks = packed(e, 2 * inter, hidden // BLOCK, BLOCK // 2)  # gate | up rows
        self.w13_scales = packed(e, 2 * inter, hidden // BLOCK)
        self.w2_blocks = packed(e, hidden, inter // BLOCK, BLOCK // 2)
        self.w2_scales = packed(e, hidden, inter // BLOCK)
        self.w13_bias = nn.Parameter(torch.empty(e, 2 * inter, dtype=dtype))  # [E, 2I]
        self.w2_bias = nn.Parameter(torch.empty(e, hidden, dtype=dtype))  # [E, H]

    def weights(self, e: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Expert ``e`` dequantized whole: (w13 [2I, H], w2 [H, I]) in ``dtype`` (tests)."""
        w13 = dequantize_mxfp4(self.w13_blocks[e], self.w13_scales[e], dtype)
        w2 = dequantize_mxfp4(self.w2_blocks[e], self.w2_scales[e], dtype)
        return w13, w2

    @staticmethod
    def _matmul(
        x: torch.Tensor, blocks: torch.Tensor, scales: torch.Tensor, out: torch.Tensor
    ) -> torch.Tensor:
        """out [n, O] = x [n, in] @ W.T for one expert's packed W ([O, in / 32, 16] blocks,
        [O, in / 32] scales), dequantized ``TILE_ROWS`` rows at a time."""
        for r0 in range(0, blocks.shape[0], TILE_ROWS):
            w = dequantize_mxfp4(blocks[r0 : r0 + TILE_ROWS], scales[r0 : r0 + TILE_ROWS], x.dtype)
            out[:, r0 : r0 + w.shape[0]] = torch.mm(x, w.t())  # [n, rows]
        return out

    def forward(
        self,
        x: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        activation: str,
        **act_args: Any,
    ) -> torch.Tensor:
        """``kernels/moe.py::fused_moe``'s contract (biases included): x [T, H],
        topk_weights [T, K] float32, topk_ids [T, K] -> [T, H] in x's dtype."""
        act = gated_activation(activation, **act_args)

        def expert(e: int, xe: torch.Tensor, ye: torch.Tensor) -> None:
            # Only the experts some token routes to are dequantized.
            gu = xe.new_empty(xe.shape[0], 2 * self.inter)
            self._matmul(xe, self.w13_blocks[e], self.w13_scales[e], gu)  # [n, 2I]
            h = act(gu.add_(self.w13_bias[e]))  # [n, I]
            self._matmul(h, self.w2_blocks[e], self.w2_scales[e], ye).add_(self.w2_bias[e])

        return run_experts(x, topk_weights, topk_ids, self.num_experts, expert)  # [T, H]


def quantize_experts_mxfp4(model: nn.Module, dtype: torch.dtype) -> int:
    """Replace (on the meta device, before loading) every MoE block's stacked experts with
    :class:`Mxfp4Experts`; returns how many."""
    from actorllm.models.moe import FusedExperts

    count = 0
    for owner in list(model.modules()):
        experts = getattr(owner, "experts", None)
        if isinstance(experts, FusedExperts):
            hidden = experts.w13.shape[2]
            with on_meta():
                owner.experts = Mxfp4Experts(experts.num_experts, hidden, experts.inter, dtype)
            count += 1
    return count
