"""LoRA's batched shrink/expand (punica's grouping, vLLM's op names): the step's row
segments, the fast segmented path, and the torch reference it is checked against.

A step's rows belong to different adapters. Once per step (``worker/lora_slots.py``) the
rows of adapters are sorted by their slot into :class:`LoRASegments`: one index tensor
``perm`` [L] and the slot of each contiguous segment. Then, per projection:

* **shrink**: the LoRA rows are gathered once (``x[perm]``) and each segment goes through
  its slot's stacked ``A`` [n_slices * R, K] (every slice of a packed projection, q|k|v or
  gate|up, at once): one GEMM per segment, written in place into ``h`` [L, n_slices * R];
* **expand**: each segment's slice i of ``h`` goes through its slot's ``B_i^T`` [R, N_i]
  into ``d_i`` [L, N_i], added back at the rows and slice i's columns (``index_add_``).

Rows of the base model are in no segment and get nothing added. Python loops run over
segments (at most ``max_loras``), never over rows. Where every row of the step is an
adapter row already in slot order (one adapter for the whole batch) the gather and the
scatter are skipped.

    >>> x = torch.ones(3, 4); out = torch.zeros(3, 2)
    >>> a = torch.ones(1, 1, 4); b = torch.ones(1, 1, 2)   # 1 slot, rank 1, one slice
    >>> seg = LoRASegments.build([0, -1, 0], torch.device("cpu"))
    >>> add_lora_segments(out, x, a, [b], [0], seg)
    >>> out[:, 0].tolist()
    [4.0, 0.0, 4.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

# (slot, its rows [G] int64 on the device, or None: every row of the step)
RowGroup = tuple[int, torch.Tensor | None]


@dataclass(frozen=True)
class LoRASegments:
    """One step's adapter rows grouped by slot (built once per step, used by every layer)."""

    num_rows: int  # T: the step's rows
    # [L] the adapter rows sorted by slot, on the device; None: rows 0..T-1 in order
    perm: torch.Tensor | None
    segments: tuple[tuple[int, int, int], ...]  # (slot, start, end) into the sorted rows
    # [3, G] int32 on the device: each segment's slot, start, length (the Triton kernels')
    table: torch.Tensor
    max_len: int  # the longest segment's rows (the Triton grid's bound)

    @property
    def num_lora_rows(self) -> int:
        return self.segments[-1][2] if self.segments else 0

    @property
    def slots(self) -> tuple[int, ...]:
        return tuple(s for s, _, _ in self.segments)

    @classmethod
    def build(cls, row_slots: Sequence[int] | np.ndarray, device: torch.device) -> LoRASegments:
        """``row_slots``: [T] each row's slot, -1 for a base-model row."""
        rs = np.asarray(row_slots, dtype=np.int64)
        rows = np.flatnonzero(rs >= 0)  # [L]
        order = np.argsort(rs[rows], kind="stable")
        perm = rows[order]  # [L] sorted by slot, rows in order within a slot
        sorted_slots = rs[perm]
        slots, starts, counts = np.unique(sorted_slots, return_index=True, return_counts=True)
        segments = tuple(
            (int(s), int(b), int(b + n)) for s, b, n in zip(slots, starts, counts, strict=True)
        )
        identity = len(perm) == len(rs) and bool(np.all(perm == np.arange(len(rs))))
        table = np.stack([slots, starts, counts]).astype(np.int32)  # [3, G]
        # one host->device copy each, per step
        return cls(
            num_rows=len(rs),
            perm=None if identity else torch.from_numpy(perm).to(device),
            segments=segments,
            table=torch.from_numpy(table).to(device),
            max_len=int(counts.max()) if len(counts) else 0,
        )


def add_lora_segments(
    out: torch.Tensor,
    x: torch.Tensor,
    a_stack: torch.Tensor,
    b_stacks: Sequence[torch.Tensor],
    col_starts: Sequence[int],
    seg: LoRASegments,
    active: frozenset[int] | set[int] | None = None,
) -> None:
    """``out[rows, cols_i] += (x[rows] A[slot]^T)[:, ranks_i] B_i[slot]`` for every
    segment and slice, in place.

    out: [T, N] the base projection's output; x: [T, K] its input; a_stack: [S, n*R, K];
    b_stacks[i]: [S, R, N_i] slice i's B^T (scaling folded in), for the columns from
    ``col_starts[i]``; the math runs in ``a_stack``'s dtype. ``active``: the slots holding
    this projection (the others add nothing; None: all)."""
    segs = [s for s in seg.segments if active is None or s[0] in active]
    if not segs:
        return
    dt, dev = a_stack.dtype, x.device
    rank = b_stacks[0].shape[1]
    xs = x if seg.perm is None else x.index_select(0, seg.perm)  # [L, K]
    xs = xs.to(dt)
    n_lora = seg.num_lora_rows
    # rows of skipped segments must add zero
    new = torch.empty if len(segs) == len(seg.segments) else torch.zeros
    h = new(n_lora, a_stack.shape[1], dtype=dt, device=dev)  # [L, n*R]
    for slot, s0, s1 in segs:  # shrink: every slice at once, one GEMM per segment
        torch.mm(xs[s0:s1], a_stack[slot].t(), out=h[s0:s1])
    for i, (b, c0) in enumerate(zip(b_stacks, col_starts, strict=True)):
        d = new(n_lora, b.shape[2], dtype=dt, device=dev)  # [L, N_i]
        for slot, s0, s1 in segs:  # expand: one GEMM per segment and slice
            torch.mm(h[s0:s1, i * rank : (i + 1) * rank], b[slot], out=d[s0:s1])
        cols = out[:, c0 : c0 + b.shape[2]]  # a view: the adds land in ``out``
        if seg.perm is None:
            cols += d.to(out.dtype)
        else:
            cols.index_add_(0, seg.perm, d.to(out.dtype))


def add_lora(
    out: torch.Tensor,
    x: torch.Tensor,
    a_stack: torch.Tensor,
    b_stacks: Sequence[torch.Tensor],
    col_starts: Sequence[int],
    groups: Sequence[RowGroup],
) -> None:
    """Torch reference: ``out[rows, cols_i] += (x[rows] A[slot]^T)[:, ranks_i] B_i[slot]^T``
    for every group, one slice at a time (what the fast paths are checked against).

    out: [T, N] the base projection's output (updated in place); x: [T, K] its input;
    a_stack: [S, n_slices * R, K] every slice's A stacked along the rank (zero-padded to R);
    b_stacks[i]: [S, N_i, R] slice i's B (scaling folded in) for columns
    ``[col_starts[i], col_starts[i] + N_i)``. The math runs in ``a_stack``'s dtype.
    """
    rank = b_stacks[0].shape[2]
    for slot, rows in groups:
        xs = x if rows is None else x.index_select(0, rows)  # [G, K]
        h = xs.to(a_stack.dtype) @ a_stack[slot].T  # shrink: [G, n_slices * R]
        for i, (b, c0) in enumerate(zip(b_stacks, col_starts, strict=True)):
            d = h[:, i * rank : (i + 1) * rank] @ b[slot].T  # expand: [G, N_i]
            cols = out[:, c0 : c0 + b.shape[1]]  # a view: the adds land in ``out``
            if rows is None:
                cols += d.to(out.dtype)
            else:
                cols.index_add_(0, rows, d.to(out.dtype))
