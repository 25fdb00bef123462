"""Fused MoE, Triton; same contract as ``kernels/moe.py::fused_moe``.

Layout: the T*K (token, slot) pairs are sorted by expert and each expert's run is padded
to a multiple of ``BLOCK_M`` (:func:`align_by_expert`, plain torch ops on the device, no
host sync: the padded length is bounded by ``T*K + E*(BLOCK_M - 1)`` and the grid uses
that bound, so tiles past the real end exit at once). Every M-tile then belongs to one
expert, and one kernel launch is a grouped GEMM over all experts:

1. ``inter[pair] = x[pair // K] @ w13[e].T``  ([T*K, 2I]);
2. the gated activation (gate | up -> [T*K, I]);
3. ``out[pair] = weight[pair] * act[pair] @ w2[e].T``  ([T*K, H]), then each token's K
   rows are summed.

Grid: (tiles over the padded sorted rows, tiles over N). Accumulation in float32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from actorllm.kernels.moe import gated_activation
from actorllm.kernels.triton._runtime import check_device

BLOCK_M = 16
BLOCK_N = 32
BLOCK_K = 32


@triton.jit
def _grouped_gemm_kernel(
    a_ptr,  # [rows of A, Kd]
    w_ptr,  # [E, N, Kd]
    c_ptr,  # [num_pairs, N]
    sorted_pairs_ptr,  # [padded] int64: pair index, or num_pairs for padding
    tile_expert_ptr,  # [padded // BLOCK_M] int64: expert of each M-tile, -1 past the end
    weights_ptr,  # [num_pairs] float32 routing weights (MUL_WEIGHT)
    num_pairs,
    N,
    Kd,
    stride_a,
    stride_we,
    stride_wn,
    stride_c,
    A_ROW_DIV: tl.constexpr,  # row of A = pair // A_ROW_DIV (K for x, 1 for inter)
    MUL_WEIGHT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    e = tl.load(tile_expert_ptr + pid_m)
    if e < 0:
        return
    m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    pairs = tl.load(sorted_pairs_ptr + m)  # [M]
    row_ok = pairs < num_pairs
    a_rows = (pairs // A_ROW_DIV).to(tl.int64)
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = n < N
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    w_base = w_ptr + e.to(tl.int64) * stride_we
    for k0 in range(0, Kd, BLOCK_K):
        kk = k0 + tl.arange(0, BLOCK_K)
        k_ok = kk < Kd
        a = tl.load(
            a_ptr + a_rows[:, None] * stride_a + kk[None, :],
            mask=row_ok[:, None] & k_ok[None, :],
            other=0.0,
        )  # [M, BK]
        w = tl.load(
            w_base + n[None, :] * stride_wn + kk[:, None],
            mask=n_ok[None, :] & k_ok[:, None],
            other=0.0,
        )  # [BK, N]
        acc += tl.dot(a, w, input_precision=DOT_PRECISION)
    if MUL_WEIGHT:
        wt = tl.load(weights_ptr + pairs, mask=row_ok, other=0.0)
        acc = acc * wt[:, None]
    tl.store(
        c_ptr + pairs.to(tl.int64)[:, None] * stride_c + n[None, :],
        acc.to(c_ptr.dtype.element_ty),
        mask=row_ok[:, None] & n_ok[None, :],
    )


def align_by_expert(
    topk_ids: torch.Tensor, num_experts: int, block_m: int = BLOCK_M
) -> tuple[torch.Tensor, torch.Tensor]:
    """(sorted_pairs [P] int64, tile_expert [P // block_m] int64), P the static bound
    ``T*K + E*(block_m - 1)`` rounded up to block_m.

    ``sorted_pairs`` holds the flat (token, slot) pair indices grouped by expert, each
    expert's run starting on a tile boundary; unused entries hold ``T*K`` (padding).
    ``tile_expert`` is each tile's expert, -1 for tiles past the last run.
    """
    flat = topk_ids.flatten().to(torch.int64)  # [T*K]
    num_pairs = flat.shape[0]
    device = flat.device
    total = num_pairs + num_experts * (block_m - 1)
    total = -(-total // block_m) * block_m
    # scatter_add, not bincount: bincount sizes its output from max(ids), a device sync
    # that would also break CUDA-graph capture.
    counts = torch.zeros(num_experts, dtype=torch.int64, device=device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))  # [E]
    padded = (counts + block_m - 1) // block_m * block_m  # [E]
    padded_end = torch.cumsum(padded, 0)  # [E]
    padded_start = padded_end - padded
    run_start = torch.cumsum(counts, 0) - counts  # [E], in the unpadded sorted order
    order = torch.argsort(flat, stable=True)  # [T*K]
    expert_of = flat.index_select(0, order)
    rank = torch.arange(num_pairs, device=device) - run_start.index_select(0, expert_of)
    dest = padded_start.index_select(0, expert_of) + rank
    sorted_pairs = torch.full((total,), num_pairs, dtype=torch.int64, device=device)
    sorted_pairs.index_copy_(0, dest, order)
    tile_start = torch.arange(0, total, block_m, device=device)  # [P / BM]
    tile_expert = torch.searchsorted(padded_end, tile_start, right=True)
    tile_expert = torch.where(tile_expert < num_experts, tile_expert, -1)
    return sorted_pairs, tile_expert


def _grouped_gemm(
    a: torch.Tensor,
    w: torch.Tensor,
    num_pairs: int,
    sorted_pairs: torch.Tensor,
    tile_expert: torch.Tensor,
    a_row_div: int,
    weights: torch.Tensor | None,
) -> torch.Tensor:
    """[num_pairs, N]: row p = (weights[p] *) a[p // a_row_div] @ w[expert(p)].T."""
    n, kd = w.shape[1], w.shape[2]
    c = torch.empty((num_pairs, n), dtype=a.dtype, device=a.device)
    grid = (tile_expert.shape[0], triton.cdiv(n, BLOCK_N))
    _grouped_gemm_kernel[grid](
        a, w, c, sorted_pairs, tile_expert, weights if weights is not None else c,
        num_pairs, n, kd, a.stride(0), w.stride(0), w.stride(1), c.stride(0),
        A_ROW_DIV=a_row_div, MUL_WEIGHT=weights is not None,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        DOT_PRECISION="ieee" if a.dtype == torch.float32 else "tf32",
    )  # fmt: skip
    return c


def fused_moe(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    activation: str = "silu",
    *,
    w13_bias: torch.Tensor | None = None,
    w2_bias: torch.Tensor | None = None,
    swiglu_limit: float = 7.0,
    swiglu_alpha: float = 1.702,
) -> torch.Tensor:
    """sum_k topk_weights[t, k] * expert_{topk_ids[t, k]}(x[t]): [T, H] -> new [T, H].

    x: [T, H]; w13: [E, 2I, H]; w2: [E, H, I]; topk_weights: [T, K]; topk_ids: [T, K].
    gpt-oss's biases (``w13_bias`` [E, 2I], ``w2_bias`` [E, H]) are added by torch ops
    beside the GEMMs, per pair. Raises ``ValueError`` on inconsistent shapes.
    """
    check_device(x, w13, w2, topk_weights, topk_ids)
    t, h = x.shape
    e, two_i, h13 = w13.shape
    if h13 != h or w2.shape != (e, h, two_i // 2) or topk_ids.shape != topk_weights.shape:
        raise ValueError(
            f"inconsistent MoE shapes: x {tuple(x.shape)}, w13 {tuple(w13.shape)}, "
            f"w2 {tuple(w2.shape)}, topk {tuple(topk_ids.shape)}/{tuple(topk_weights.shape)}"
        )
    k = topk_ids.shape[1]
    if t == 0:
        return torch.empty_like(x)
    x, w13, w2 = x.contiguous(), w13.contiguous(), w2.contiguous()
    sorted_pairs, tile_expert = align_by_expert(topk_ids, e)
    inter = _grouped_gemm(x, w13, t * k, sorted_pairs, tile_expert, k, None)  # [T*K, 2I]
    ids = topk_ids.flatten()  # [T*K], pair p's expert
    if w13_bias is not None:
        inter.add_(w13_bias.index_select(0, ids))
    act = gated_activation(activation, swiglu_limit, swiglu_alpha)(inter).contiguous()
    weights = topk_weights.flatten().float().contiguous()
    out = _grouped_gemm(act, w2, t * k, sorted_pairs, tile_expert, 1, weights)  # [T*K, H]
    if w2_bias is not None:  # the kernel weighted the GEMM rows; the bias takes its weight
        out.add_((weights.unsqueeze(1) * w2_bias.index_select(0, ids)).to(out.dtype))
    return out.view(t, k, h).sum(dim=1)
