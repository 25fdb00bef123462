"""LoRA's batched shrink/expand, torch reference (punica's grouping, vLLM's op names).

A step's rows belong to different adapters. The rows of each step slot are gathered once,
*shrunk* through that slot's stacked ``A`` (all slices of a packed projection at once) and
*expanded* through each slice's ``B`` into that slice's output columns, then added back at
their rows. Rows of the base model are in no group and get nothing added.

    >>> x = torch.ones(3, 4); out = torch.zeros(3, 2)
    >>> a = torch.ones(1, 1, 4); b = torch.ones(1, 2, 1)   # 1 slot, rank 1, one slice
    >>> add_lora(out, x, a, [b], [0], [(0, torch.tensor([0, 2]))])
    >>> out[:, 0].tolist()
    [4.0, 0.0, 4.0]
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

# (slot, its rows [G] int64 on the device, or None: every row of the step)
RowGroup = tuple[int, torch.Tensor | None]


def add_lora(
    out: torch.Tensor,
    x: torch.Tensor,
    a_stack: torch.Tensor,
    b_stacks: Sequence[torch.Tensor],
    col_starts: Sequence[int],
    groups: Sequence[RowGroup],
) -> None:
    """``out[rows, cols_i] += (x[rows] A[slot]^T)[:, ranks_i] B_i[slot]^T`` for every group.

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
