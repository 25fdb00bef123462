"""LoRA's batched shrink/expand (punica's grouping, vLLM's op names): the step's row
segments, the fast segmented path, and the torch reference it is checked against.

A step's rows belong to different adapters. Once per step (``worker/lora_slots.py``) the
rows of adapters are sorted by their slot into :class:`LoRASegments`: one index tensor
``perm`` [L] and the slot of each contiguous segment. Then, per projection:

* **shrink**: the adapter rows are gathered once into segments padded to the longest one
  (``x[pad_index]`` [G, Gmax, K]) and go through their slots' stacked ``A`` [G, n*R, K]
  (every slice of a packed projection, q|k|v or gate|up, at once): one ``bmm``;
* **expand**: ``h`` [G, Gmax, n*R] through the slots' block ``B`` [G, n*R, N] (slice i's
  B^T in rank rows [i R, (i + 1) R) and its own columns; zero elsewhere): one ``bmm`` for
  all slices, added back at the rows (one ``index_add_``; padding rows add zero).

Four or five ops per projection, whatever the number of adapters or rows: on a CPU the
cost of a small op is mostly its fixed overhead (and, on a loaded host, an OpenMP barrier),
so few batched ops beat one GEMM pair per adapter. Rows of the base model are in no
segment and get nothing added; there are no Python loops over rows. Where the whole step is
one adapter the gather and the scatter are skipped. The per-slice form (no zero blocks)
is :func:`add_lora`, the reference the fast paths are tested against.

**Dense** (half-precision math, most rows adapted): on a CPU whose bf16 GEMMs run on
hardware (AMX, AVX512-BF16) the gather, the scatter and the dtype casts around two tiny
``bmm`` cost more than the GEMMs themselves. Instead every row goes through every step
slot's A at once (``x`` [T, K] @ [K, G*n*R]), each row keeps its own slot's block (a
per-step one-hot [T, G], base rows all zero) and one ``addmm_`` expands into ``out``
through the slots' B stacked [G*n*R, N]: three ops in the model's dtype, no copy of ``x``
or of the output (1.9 against 2.9 ms per layer of the 75M shape, 128 rows over 4 adapters,
one thread of an AMX host).

    >>> x = torch.ones(3, 4); out = torch.zeros(3, 2)
    >>> a = torch.ones(1, 1, 4); b = torch.ones(1, 1, 2)   # 1 slot, rank 1, one slice
    >>> seg = LoRASegments.build([0, -1, 0], torch.device("cpu"))
    >>> add_lora_segments(out, x, a, b, [0], seg)
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
    # The torch path's padded layout, every segment padded to ``max_len`` rows: [G * Gmax]
    # each padded row's token row (padding: row 0, which gets zeros added), [G, Gmax, 1]
    # 1.0 for a real row (None: no padding), [G] the segments' slots
    pad_index: torch.Tensor
    pad_mask: torch.Tensor | None
    slot_index: torch.Tensor
    # The dense path's [T, G, 1] float32, 1.0 where row t uses the step's g-th slot; None:
    # the step takes the segmented path (built only for a dense step, see ``build``)
    one_hot: torch.Tensor | None

    @property
    def num_lora_rows(self) -> int:
        return self.segments[-1][2] if self.segments else 0

    @property
    def slots(self) -> tuple[int, ...]:
        return tuple(s for s, _, _ in self.segments)

    @classmethod
    def build(
        cls, row_slots: Sequence[int] | np.ndarray, device: torch.device, half: bool = False
    ) -> LoRASegments:
        """``row_slots``: [T] each row's slot, -1 for a base-model row. ``half``: the slots
        hold half-precision math on the torch path; then a step with at least half its
        rows adapted takes the dense path (its one-hot is built here, once per step)."""
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
        gmax = int(counts.max()) if len(counts) else 0
        pos = np.arange(gmax)[None, :]  # [1, Gmax]
        real = pos < counts[:, None]  # [G, Gmax]
        pad_index = np.where(real, perm[np.minimum(starts[:, None] + pos, len(perm) - 1)], 0)
        padded = not bool(real.all())
        one_hot = None
        if half and 2 * len(rows) >= len(rs):
            one_hot = np.zeros((len(rs), len(slots), 1), dtype=np.float32)  # [T, G, 1]
            one_hot[rows, np.searchsorted(slots, rs[rows]), 0] = 1.0
        # one host->device copy each, per step
        return cls(
            num_rows=len(rs),
            perm=None if identity else torch.from_numpy(perm).to(device),
            segments=segments,
            table=torch.from_numpy(table).to(device),
            max_len=gmax,
            pad_index=torch.from_numpy(pad_index.reshape(-1)).to(device),
            pad_mask=torch.from_numpy(real[:, :, None].astype(np.float32)).to(device)
            if padded
            else None,
            slot_index=torch.from_numpy(slots.astype(np.int64)).to(device),
            one_hot=None if one_hot is None else torch.from_numpy(one_hot).to(device),
        )


def add_lora_segments(
    out: torch.Tensor,
    x: torch.Tensor,
    a_stack: torch.Tensor,
    b_block: torch.Tensor,
    col_starts: Sequence[int],
    seg: LoRASegments,
    active: frozenset[int] | set[int] | None = None,
) -> None:
    """``out[rows] += (x[rows] A[slot]^T) B[slot]`` for every segment, in place: a few
    batched ops per projection, whatever the number of adapters.

    out: [T, N] the base projection's output; x: [T, K] its input; a_stack: [S, n*R, K];
    b_block: [S, n*R, N] (slice i's B^T in rank rows [i R, (i + 1) R) and its own output
    columns from ``col_starts[i]``, zero elsewhere; scaling folded in); the math runs in
    ``a_stack``'s dtype. ``active``: the slots holding this projection (others add
    nothing; None: all)."""
    del col_starts  # the block layout holds the columns
    if seg.one_hot is not None:  # a dense step (``LoRASegments.build``)
        _add_lora_dense(out, x, a_stack, b_block, seg.one_hot, seg)  # empty slots add zeros
        return
    if active is not None and not all(s in active for s in seg.slots):
        _add_lora_loop(out, x, a_stack, b_block, seg, active)
        return
    dt = a_stack.dtype
    g, gmax = len(seg.segments), seg.max_len
    every_slot = seg.slots == tuple(range(a_stack.shape[0]))
    a = a_stack if every_slot else a_stack.index_select(0, seg.slot_index)  # [G, n*R, K]
    b = b_block if every_slot else b_block.index_select(0, seg.slot_index)  # [G, n*R, N]
    if seg.perm is None and g == 1:  # one adapter, every row in order: no gather/scatter
        h = x.to(dt) @ a[0].t()  # shrink: [T, n*R]
        out += (h @ b[0]).to(out.dtype)  # expand: [T, N]
        return
    xs = x.index_select(0, seg.pad_index).to(dt).view(g, gmax, x.shape[1])  # [G, Gmax, K]
    h = torch.bmm(xs, a.transpose(1, 2))  # shrink: [G, Gmax, n*R]
    if seg.pad_mask is not None:
        h.mul_(seg.pad_mask.to(dt))  # padding rows add zero
    d = torch.bmm(h, b)  # expand: [G, Gmax, N]
    out.index_add_(0, seg.pad_index, d.view(g * gmax, -1).to(out.dtype))


def _add_lora_dense(
    out: torch.Tensor,
    x: torch.Tensor,
    a_stack: torch.Tensor,
    b_block: torch.Tensor,
    one_hot: torch.Tensor,
    seg: LoRASegments,
) -> None:
    """Every row through every step slot's A, masked to its own slot, one ``addmm_`` into
    ``out`` (the module docstring's dense path). Shapes as :func:`add_lora_segments`'; a
    slot that does not hold this projection is all zeros (``LoRALayer.fill``), so it
    needs no ``active`` check."""
    dt = a_stack.dtype
    g, t = len(seg.segments), x.shape[0]
    every_slot = seg.slots == tuple(range(a_stack.shape[0]))
    a = a_stack if every_slot else a_stack.index_select(0, seg.slot_index)  # [G, n*R, K]
    b = b_block if every_slot else b_block.index_select(0, seg.slot_index)  # [G, n*R, N]
    h = x.to(dt) @ a.reshape(-1, a.shape[2]).t()  # shrink: [T, G*n*R]
    h.view(t, g, -1).mul_(one_hot.to(dt))  # each row keeps its own slot's ranks
    out.addmm_(h, b.reshape(-1, b.shape[2]).to(out.dtype))  # expand: [T, N]


def _add_lora_loop(
    out: torch.Tensor,
    x: torch.Tensor,
    a_stack: torch.Tensor,
    b_block: torch.Tensor,
    seg: LoRASegments,
    active: frozenset[int] | set[int],
) -> None:
    """Some segments' slots do not hold this projection: one GEMM pair per active one."""
    dt = a_stack.dtype
    for slot, s0, s1 in seg.segments:
        if slot not in active:
            continue
        rows = seg.pad_index.view(len(seg.segments), -1)[seg.slots.index(slot), : s1 - s0]
        d = (x.index_select(0, rows).to(dt) @ a_stack[slot].t()) @ b_block[slot]  # [G, N]
        out.index_add_(0, rows, d.to(out.dtype))


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


def block_b(
    b_stacks: Sequence[torch.Tensor], col_starts: Sequence[int], n_out: int
) -> torch.Tensor:
    """Per-slice ``B`` stacks [S, N_i, R] as one block ``B`` [S, n*R, N] (slice i's B^T in
    rank rows [i R, (i + 1) R), columns [c0_i, c0_i + N_i); zero elsewhere)."""
    s, _, r = b_stacks[0].shape
    full = b_stacks[0].new_zeros(s, len(b_stacks) * r, n_out)
    for i, (b, c0) in enumerate(zip(b_stacks, col_starts, strict=True)):
        full[:, i * r : (i + 1) * r, c0 : c0 + b.shape[1]] = b.transpose(1, 2)
    return full
