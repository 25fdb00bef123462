"""Rotary position embedding (NeoX / HF rotate_half layout), Triton.

Same contract as ``kernels/rotary.py``.

Tiling: one program per token rotates all its query heads and all its key heads, each as one
[next_pow2(H), next_pow2(D/2)] tile of (first half, second half) lane pairs. The cos/sin row
is read once per token from ``cos_sin_cache: [P, D]`` (cos | sin); scaling variants (linear,
llama3) live in that table, so the kernel is scaling-agnostic. Math in float32, results in
the input dtypes, written to new tensors (out of place, like the reference).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from actorllm.kernels.triton._runtime import check_device, next_pow2


@triton.jit
def _rotate_heads(
    src_ptr,
    dst_ptr,
    row,
    cos,  # [1, BLOCK_HALF] f32
    sin,
    H,
    HALF,
    stride_src_t,
    stride_src_h,
    stride_dst_t,
    stride_dst_h,
    BLOCK_H: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    heads = tl.arange(0, BLOCK_H)[:, None]  # [BH, 1]
    lanes = tl.arange(0, BLOCK_HALF)[None, :]  # [1, BHALF]
    mask = (heads < H) & (lanes < HALF)
    src = src_ptr + row * stride_src_t + heads * stride_src_h + lanes
    x1 = tl.load(src, mask=mask, other=0.0)  # [BH, BHALF]
    x2 = tl.load(src + HALF, mask=mask, other=0.0)
    x1f = x1.to(tl.float32)
    x2f = x2.to(tl.float32)
    dst = dst_ptr + row * stride_dst_t + heads * stride_dst_h + lanes
    tl.store(dst, (x1f * cos - x2f * sin).to(x1.dtype), mask=mask)
    tl.store(dst + HALF, (x2f * cos + x1f * sin).to(x1.dtype), mask=mask)


@triton.jit
def _rotary_kernel(
    pos_ptr,  # [T] int64
    q_ptr,  # [T, Hq, D]
    k_ptr,  # [T, Hk, D]
    cs_ptr,  # [P, D]: cos | sin
    q_out_ptr,  # [T, Hq, D]
    k_out_ptr,  # [T, Hk, D]
    HQ,
    HK,
    HALF,
    stride_q_t,
    stride_q_h,
    stride_k_t,
    stride_k_h,
    stride_qo_t,
    stride_qo_h,
    stride_ko_t,
    stride_ko_h,
    stride_cs,
    BLOCK_HQ: tl.constexpr,
    BLOCK_HK: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + row).to(tl.int64)
    lanes = tl.arange(0, BLOCK_HALF)[None, :]  # [1, BHALF]
    cs_mask = lanes < HALF
    cos = tl.load(cs_ptr + pos * stride_cs + lanes, mask=cs_mask, other=0.0).to(tl.float32)
    sin = tl.load(cs_ptr + pos * stride_cs + HALF + lanes, mask=cs_mask, other=0.0).to(tl.float32)
    _rotate_heads(q_ptr, q_out_ptr, row, cos, sin, HQ, HALF, stride_q_t, stride_q_h,
                  stride_qo_t, stride_qo_h, BLOCK_HQ, BLOCK_HALF)  # fmt: skip
    _rotate_heads(k_ptr, k_out_ptr, row, cos, sin, HK, HALF, stride_k_t, stride_k_h,
                  stride_ko_t, stride_ko_h, BLOCK_HK, BLOCK_HALF)  # fmt: skip


def _unit_last(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def apply_rotary(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q and k by their positions, out of place.

    positions: [T] int64; q: [T, Hq, D]; k: [T, Hk, D] (strided views of a fused qkv are
    fine); cos_sin_cache: [P, D] with cos | sin. Returns new (q, k), same shapes and dtypes.
    Positions must be < P (not checked: that would be a host sync). Raises ``ValueError``
    when the table width is not D.
    """
    check_device(positions, q, k, cos_sin_cache)
    t, hq, d = q.shape
    hk = k.shape[1]
    if k.shape[0] != t or k.shape[2] != d or positions.shape != (t,):
        raise ValueError(
            f"shape mismatch: positions {list(positions.shape)}, "
            f"q {list(q.shape)}, k {list(k.shape)}"
        )
    if cos_sin_cache.shape[-1] != d or d % 2:
        raise ValueError(
            f"cos_sin_cache width {cos_sin_cache.shape[-1]} must equal the (even) head_dim {d}"
        )
    q, k, cs = _unit_last(q), _unit_last(k), _unit_last(cos_sin_cache)
    q_out = torch.empty((t, hq, d), dtype=q.dtype, device=q.device)
    k_out = torch.empty((t, hk, d), dtype=k.dtype, device=k.device)
    if t > 0:
        _rotary_kernel[(t,)](
            positions, q, k, cs, q_out, k_out,
            hq, hk, d // 2,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1),
            q_out.stride(0), q_out.stride(1), k_out.stride(0), k_out.stride(1),
            cs.stride(0),
            BLOCK_HQ=next_pow2(hq), BLOCK_HK=next_pow2(hk), BLOCK_HALF=next_pow2(d // 2),
        )  # fmt: skip
    return q_out, k_out
