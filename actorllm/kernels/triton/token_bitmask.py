"""The grammar token bitmask fused with the additive logits adjust, Triton.

Same contract as ``kernels/token_bitmask.py``: ``logits += adjust`` (when given), then
-inf wherever the row's bitmask bit is 0. One program per (logits row, vocabulary tile);
each loads the tile's 32-bit words once (``BLOCK_V / 32`` of them) and tests one bit per
token, so the mask is never unpacked in memory. Unconstrained rows (``rows[n] == -1``)
only get the adjust. In place, no host sync.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from actorllm.kernels.triton._runtime import check_device, next_pow2


@triton.jit
def _bitmask_kernel(
    logits_ptr,  # [N, V] f32, in place
    adjust_ptr,  # [N, V] f32, read when HAS_ADJUST
    mask_ptr,  # [R, W] int32
    rows_ptr,  # [N] int64, bitmask row or -1
    V,
    W,
    stride_l,
    stride_a,
    stride_m,
    HAS_ADJUST: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    n = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    ok = cols < V
    x = tl.load(logits_ptr + n * stride_l + cols, mask=ok, other=0.0)
    if HAS_ADJUST:
        x += tl.load(adjust_ptr + n * stride_a + cols, mask=ok, other=0.0)
    r = tl.load(rows_ptr + n)
    if r >= 0:
        word_idx = cols // 32
        words = tl.load(mask_ptr + r * stride_m + word_idx, mask=ok & (word_idx < W), other=0)
        bit = (words >> (cols % 32).to(tl.int32)) & 1
        x = tl.where(bit != 0, x, float("-inf"))
    tl.store(logits_ptr + n * stride_l + cols, x, mask=ok)


def apply_token_bitmask(
    logits: torch.Tensor,
    bitmask: torch.Tensor,
    rows: torch.Tensor,
    adjust: torch.Tensor | None = None,
    *,
    block_v: int | None = None,
) -> torch.Tensor:
    """In-place ``logits + adjust`` then bitmask; logits: [N, V] float32 (contiguous rows),
    bitmask: [R, W] int32, rows: [N] int64 (-1 = unconstrained), adjust: [N, V] or None.
    Returns ``logits``. ``block_v`` (a power of two, >= 32) overrides the tile, for tests."""
    check_device(logits, bitmask, rows, *(() if adjust is None else (adjust,)))
    if logits.dim() != 2 or logits.dtype != torch.float32 or logits.stride(-1) != 1:
        raise ValueError("logits must be [N, V] float32 with contiguous rows")
    n, v = logits.shape
    if rows.shape != (n,):
        raise ValueError(f"rows must be [{n}], got {list(rows.shape)}")
    if bitmask.dim() != 2 or bitmask.dtype != torch.int32:
        raise ValueError("bitmask must be [R, W] int32")
    if adjust is not None and (adjust.shape != logits.shape or adjust.stride(-1) != 1):
        raise ValueError("adjust must match logits, with contiguous rows")
    if n == 0 or v == 0:
        return logits
    block = block_v or min(next_pow2(v), 1024)
    if block < 32 or block & (block - 1):
        raise ValueError(f"block_v must be a power of two >= 32, got {block}")
    mask = bitmask if bitmask.shape[0] else bitmask.new_zeros(1, max(bitmask.shape[1], 1))
    _bitmask_kernel[(n, triton.cdiv(v, block))](
        logits,
        adjust if adjust is not None else logits,
        mask,
        rows.to(torch.int64),
        v,
        mask.shape[1],
        logits.stride(0),
        adjust.stride(0) if adjust is not None else 0,
        mask.stride(0),
        HAS_ADJUST=adjust is not None,
        BLOCK_V=block,
    )
    return logits
