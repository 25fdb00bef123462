"""LoRA shrink and expand, Triton (punica's segmented GEMMs); same contract as
``kernels/lora.py::add_lora_segments``.

The step's adapter rows are sorted by slot into segments (``LoRASegments``: ``perm`` [L]
and the ``table`` [3, G] of each segment's slot, start and length), built once per step.
Each kernel's grid is (segment, M-tile inside the segment, N-tile); a program reads its
segment's slot and multiplies its rows by that slot's matrix, so one launch serves every
adapter of the step:

1. **shrink** ``h[r] = x[perm[r]] @ A[slot]^T`` for every slice of a packed projection at
   once (``A`` [S, n*R, K]); ``h`` [L, n*R] is float32 (punica's intermediate);
2. **expand**, once per slice i: ``out[perm[r], c0_i + n] += h[r, iR:(i+1)R] @ B_i[slot]``
   (``B_i`` [S, R, N_i]), a read-add-write of the base output (rows are distinct: no
   atomics).

M-tiles past a segment's end exit at once (the grid is sized by the longest segment, known
on the host). Accumulation in float32; inputs bf16, fp16 or fp32.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from actorllm.kernels.lora import LoRASegments
from actorllm.kernels.triton._runtime import check_device

BLOCK_M = 16
BLOCK_N = 32
BLOCK_K = 32


@triton.jit
def _segment_gemm_kernel(
    x_ptr,  # [rows, K] (gathered through perm when GATHER_X)
    w_ptr,  # [S, K, N] as strides: w[slot, k, n]
    out_ptr,  # [rows, N] (scattered through perm when SCATTER_OUT)
    perm_ptr,  # [L] int64: sorted row -> token row
    table_ptr,  # [3, G] int32: slot, start, length per segment
    num_segments,
    N,
    K,
    stride_x,
    stride_ws,
    stride_wk,
    stride_wn,
    stride_out,
    HAS_PERM: tl.constexpr,
    GATHER_X: tl.constexpr,  # x rows are token rows (shrink) rather than sorted rows
    SCATTER_OUT: tl.constexpr,  # out rows are token rows, added to (expand)
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    g = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_n = tl.program_id(2)
    slot = tl.load(table_ptr + g).to(tl.int64)
    start = tl.load(table_ptr + num_segments + g)
    length = tl.load(table_ptr + 2 * num_segments + g)
    if pid_m * BLOCK_M >= length:
        return
    m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = m < length
    srt = (start + m).to(tl.int64)  # sorted rows
    if HAS_PERM:
        tok = tl.load(perm_ptr + srt, mask=row_ok, other=0)
    else:
        tok = srt
    x_rows = tok if GATHER_X else srt
    out_rows = tok if SCATTER_OUT else srt
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = n < N
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    w_base = w_ptr + slot * stride_ws
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + tl.arange(0, BLOCK_K)
        k_ok = kk < K
        a = tl.load(
            x_ptr + x_rows[:, None] * stride_x + kk[None, :],
            mask=row_ok[:, None] & k_ok[None, :],
            other=0.0,
        )  # [M, BK]
        w = tl.load(
            w_base + kk[:, None] * stride_wk + n[None, :] * stride_wn,
            mask=k_ok[:, None] & n_ok[None, :],
            other=0.0,
        )  # [BK, N]
        acc += tl.dot(a.to(w.dtype), w, input_precision=DOT_PRECISION)
    ptrs = out_ptr + out_rows[:, None] * stride_out + n[None, :]
    mask = row_ok[:, None] & n_ok[None, :]
    if SCATTER_OUT:
        acc += tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    tl.store(ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask)


def _launch(
    x: torch.Tensor,
    w: torch.Tensor,
    w_strides: tuple[int, int, int],
    out: torch.Tensor,
    seg: LoRASegments,
    table: torch.Tensor,
    n: int,
    k: int,
    gather_x: bool,
    scatter_out: bool,
) -> None:
    num_segments = table.shape[1]
    grid = (num_segments, triton.cdiv(seg.max_len, BLOCK_M), triton.cdiv(n, BLOCK_N))
    perm = seg.perm if seg.perm is not None else table  # unread without a perm
    _segment_gemm_kernel[grid](
        x, w, out, perm, table, num_segments, n, k,
        x.stride(0), *w_strides, out.stride(0),
        HAS_PERM=seg.perm is not None, GATHER_X=gather_x, SCATTER_OUT=scatter_out,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        DOT_PRECISION="ieee" if w.dtype == torch.float32 else "tf32",
    )  # fmt: skip


def add_lora_segments(
    out: torch.Tensor,
    x: torch.Tensor,
    a_stack: torch.Tensor,
    b_block: torch.Tensor,
    col_starts: Sequence[int],
    seg: LoRASegments,
    active: frozenset[int] | set[int] | None = None,
) -> None:
    """``out[rows, cols_i] += (x[rows] A[slot]^T)[:, ranks_i] B_i[slot]`` for every segment
    and slice, in place (shapes as ``kernels/lora.py::add_lora_segments``; slice i's
    ``B_i`` [S, R, N_i] is read in place from the block ``B``, skipping its zeros)."""
    check_device(out, x, a_stack, b_block)
    n_slices = len(col_starts)
    ends = [*col_starts[1:], out.shape[1]]
    rank = b_block.shape[1] // n_slices
    b_stacks = [
        b_block[:, i * rank : (i + 1) * rank, c0:c1]  # [S, R, N_i], a view
        for i, (c0, c1) in enumerate(zip(col_starts, ends, strict=True))
    ]
    if out.stride(1) != 1 or x.stride(1) != 1 or not a_stack.is_contiguous():
        raise ValueError("add_lora_segments: out, x and A need unit column strides")
    table = seg.table
    if active is not None:
        keep = [i for i, s in enumerate(seg.slots) if s in active]
        if not keep:
            return
        if len(keep) < len(seg.segments):  # rows of the other segments add nothing
            table = table[:, keep].contiguous()
    n_lora = seg.num_lora_rows
    nr, k = a_stack.shape[1], a_stack.shape[2]
    h = torch.zeros(n_lora, nr, dtype=torch.float32, device=x.device)  # [L, n*R]
    # shrink: w[slot, k, n] = A[slot, n, k]
    a_strides = (a_stack.stride(0), a_stack.stride(2), a_stack.stride(1))
    _launch(x, a_stack, a_strides, h, seg, table, nr, k, gather_x=True, scatter_out=False)
    for i, (b, c0) in enumerate(zip(b_stacks, col_starts, strict=True)):
        cols = out[:, c0 : c0 + b.shape[2]]  # a view: the kernel adds into ``out``
        hi = h[:, i * rank : (i + 1) * rank]  # [L, R]
        b_strides = (b.stride(0), b.stride(1), b.stride(2))
        _launch(hi, b, b_strides, cols, seg, table, b.shape[2], rank, gather_x=False,
                scatter_out=True)  # fmt: skip
