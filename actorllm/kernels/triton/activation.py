"""SiLU-and-mul, Triton; same contract as ``kernels/activation.py``.

Tiling: grid (T, cdiv(I, BLOCK)); each program reads BLOCK gate lanes and the BLOCK up lanes
I columns later. ``silu(gate)`` is computed in float32 and rounded to the input dtype before
the multiply, matching torch's ``F.silu(gate) * up`` rounding for bf16/fp16.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from actorllm.kernels.triton._runtime import check_device, next_pow2


@triton.jit
def _silu_and_mul_kernel(
    x_ptr,  # [T, 2 * I]: gate | up
    out_ptr,  # [T, I]
    I,
    stride_x,
    stride_out,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < I
    gate = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    up = tl.load(x_ptr + row * stride_x + I + cols, mask=mask, other=0.0)
    g = gate.to(tl.float32)
    act = (g * tl.sigmoid(g)).to(gate.dtype)
    y = act.to(tl.float32) * up.to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up``: x [T, 2 * I] laid out as [gate | up] -> new [T, I], x's dtype.

    Any leading dims; raises ``ValueError`` if the last dim is odd.
    """
    check_device(x)
    two_i = x.shape[-1]
    if two_i % 2:
        raise ValueError(f"last dim must be even (gate | up), got {two_i}")
    i = two_i // 2
    x2 = x.reshape(-1, two_i)  # [T, 2I]
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    out = torch.empty((x2.shape[0], i), dtype=x.dtype, device=x.device)  # [T, I]
    block = min(next_pow2(i), 1024)
    if x2.shape[0] > 0 and i > 0:
        grid = (x2.shape[0], triton.cdiv(i, block))
        _silu_and_mul_kernel[grid](x2, out, i, x2.stride(0), out.stride(0), BLOCK=block)
    return out.view(*x.shape[:-1], i)
