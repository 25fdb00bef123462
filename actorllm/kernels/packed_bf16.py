"""What the few-rows bf16 linear kernels share (``amx_linear.py`` on AMX tiles,
``bf16_dot_linear.py`` on AVX512-BF16 dot products): which weights they take, packing one
into its blocks of output columns, and the call that multiplies rows by a packed weight
(each kernel's C entry points have the same signatures)."""

from __future__ import annotations

from typing import Any

import torch

from actorllm.kernels import native_ranges


def packable(weight: torch.Tensor, k_step: int) -> bool:
    """``weight`` is a CPU bf16 [O, I] matrix whose input width is a positive multiple of
    ``k_step``."""
    return (
        weight.dtype == torch.bfloat16
        and weight.device.type == "cpu"
        and weight.dim() == 2
        and weight.shape[1] % k_step == 0
        and weight.shape[1] >= k_step
    )


def pack(fn: Any, weight: torch.Tensor, block_cols: int) -> torch.Tensor:
    """weight: bf16 [O, I] -> bf16 [ceil(O / block_cols) * block_cols * I] through the
    kernel's ``fn(w, O, I, packed)``; the padding columns are zero."""
    w = weight.detach().contiguous()
    o, i = w.shape
    packed = torch.empty(-(-o // block_cols) * block_cols * i, dtype=torch.bfloat16)
    fn(w.data_ptr(), o, i, packed.data_ptr())
    return packed


def multiply(
    fn: Any,
    name: str,
    x: torch.Tensor,
    packed: torch.Tensor,
    out_features: int,
    bias: torch.Tensor | None,
) -> torch.Tensor:
    """x: bf16 [M, I] (CPU) times a weight packed by :func:`pack` (+ bias, bf16
    [out_features] or None) -> bf16 [M, out_features], through the kernel's ``fn`` (a
    profiler range ``name`` around it)."""
    x = x.contiguous()  # the kernels read rows of exactly I values
    m, i = x.shape
    out = torch.empty(m, out_features, dtype=torch.bfloat16)  # [M, O]
    if m == 0:
        return out
    b = None if bias is None else bias.detach().to(torch.bfloat16).contiguous()
    args = (
        x.data_ptr(), m, i, packed.data_ptr(), out_features,
        None if b is None else b.data_ptr(), out.data_ptr(), out_features,
        torch.get_num_threads(),
    )  # fmt: skip
    if not native_ranges.call(name, fn, *args):
        raise ValueError(f"{name} does not take an input of shape {tuple(x.shape)}")
    return out
