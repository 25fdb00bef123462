"""A linear and what follows it in one oneDNN call: an activation (``gelu``, ``relu``) or
a residual add, applied to the float32 accumulator before the one rounding to the output
dtype, instead of a second pass over the ``[M, O]`` output.

Where the linear is a :class:`OneDNNLinear` whose prepacked oneDNN copy serves the input
(:meth:`OneDNNLinear.onednn_packed`), the post-op rides the matmul (at a bucketed row count,
``onednn_linear.packed_product``, as the linear's own forward); anywhere else (GPU, a
widened bf16 weight, few rows on the AMX copy, no oneDNN) the same arithmetic runs as
``act(linear(x))`` / ``linear(x) + residual``.

    h = linear_act(layer.intermediate.dense, x, "gelu")     # [M, I]
    y = linear_add(layer.output.dense, h, residual)         # [M, H]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from actorllm.models.onednn_linear import BATCH_HINT, OneDNNLinear, packed_product, pad_rows

# activation name -> (oneDNN post-op, its algorithm, the unfused function)
ACTIVATIONS = {
    "gelu": ("gelu", "none", lambda x: F.gelu(x)),  # erf
    "gelu_tanh": ("gelu", "tanh", lambda x: F.gelu(x, approximate="tanh")),
    "relu": ("relu", "", F.relu),
}


def linear_act(linear: nn.Linear, x: torch.Tensor, act: str) -> torch.Tensor:
    """act(linear(x)); x: [..., I] -> [..., O]."""
    attr, algorithm, fn = ACTIVATIONS[act]
    if not isinstance(linear, OneDNNLinear) or (packed := linear.onednn_packed(x)) is None:
        return fn(linear(x))
    rows = x.reshape(-1, x.shape[-1])  # [M, I]
    out = packed_product(rows, packed, linear.packed_bias, attr, algorithm)  # [M, O]
    return out.view(*x.shape[:-1], out.shape[-1])  # [..., O]


def linear_add(linear: nn.Linear, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """linear(x) + residual; x: [..., I], residual: [..., O] (x's dtype) -> [..., O]."""
    packed = None
    if isinstance(linear, OneDNNLinear) and residual.dtype == x.dtype:
        packed = linear.onednn_packed(x)
    if packed is None:
        return linear(x) + residual
    rows = x.reshape(-1, x.shape[-1])  # [M, I]
    m = rows.shape[0]
    other = pad_rows(residual.reshape(m, -1).contiguous())  # [row_bucket(M), O]
    op = torch.ops.mkldnn._linear_pointwise.binary
    out = op(pad_rows(rows), other, packed, linear.packed_bias, "add")[:m]  # [M, O]
    return out.view(*x.shape[:-1], out.shape[-1])  # [..., O]


class StackedLinears:
    """Linears of one input (attention's query, key and value) as one matmul: their
    weights concatenated along the output, packed once for oneDNN and repacked when any
    of them is repacked (:attr:`OneDNNLinear.pack_count`: a rewrite its version check or
    ``invalidate_packed`` caught). Where the packed
    path does not serve the input, each linear runs on its own.

        qkv = StackedLinears(attn.query, attn.key, attn.value)
        q, k, v = qkv(x)                                    # [M, O_i] views of one [M, sum O]
    """

    def __init__(self, *linears: nn.Linear) -> None:
        self.linears = linears
        self.packed: torch.Tensor | None = None  # oneDNN layout of the [sum O, I] weight
        self.bias: torch.Tensor | None = None  # [sum O]
        self.versions: tuple[int, ...] | None = None  # the linears' pack_count when stacked

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """x: [M, I] -> one [M, O_i] per linear."""
        packed = [m for m in self.linears if isinstance(m, OneDNNLinear)]
        if len(packed) < len(self.linears) or any(m.onednn_packed(x) is None for m in packed):
            return tuple(m(x) for m in self.linears)
        lins = packed
        versions = tuple(m.pack_count for m in lins)
        if self.packed is None or versions != self.versions:
            with torch.no_grad():
                w = torch.cat([m.weight.detach() for m in lins])  # [sum O, I]
                self.packed = torch.ops.mkldnn._reorder_linear_weight(w, BATCH_HINT)
                self.bias = None
                if any(m.bias is not None for m in lins):  # a missing bias adds zeros
                    self.bias = torch.cat([
                        w.new_zeros(m.out_features) if m.bias is None else m.bias.detach()
                        for m in lins
                    ])  # fmt: skip
            self.versions = versions
        out = packed_product(x, self.packed, self.bias)  # [M, sum O]
        return tuple(out.split([m.out_features for m in lins], dim=-1))  # [M, O_i] views
