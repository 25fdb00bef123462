"""Row counts the CPU linears run at, and activations allocated with room for them.

oneDNN creates a matmul primitive per input shape (through torch), and a new one costs
more than the product it serves, so the linears (``models/onednn_linear.py``) run a row
count rounded up to one of a few buckets. The rounding used to copy the rows into a
larger tensor before every product; a linear's output rows depend on their own input rows
only, so when the input's storage already extends to the bucket (:func:`empty_rows`) the
rows past it are read as they are and their outputs cut off, with no copy.
"""

from __future__ import annotations

import torch

# Row counts up to this run oneDNN on their own shape; above it :func:`row_bucket` rounds
# them up to one of 8 shapes per power of two.
EXACT_ROWS_MAX = 16


def row_bucket(m: int) -> int:
    """The row count to run ``m`` rows at so oneDNN reuses its matmul primitives: torch
    creates one per input shape, and a new one costs more than the product it serves
    (2-core Xeon, AMX, bf16 [M, 384] x [384, 1536]: 16.4 ms for an M not seen before, 3.5
    ms for one seen). ``m`` itself up to :data:`EXACT_ROWS_MAX`, else rounded up to a
    multiple of 2^(floor(log2 m) - 3): at most 12.5% more rows, 8 shapes per octave."""
    if m <= EXACT_ROWS_MAX:
        return m
    step = 1 << (m.bit_length() - 4)
    return -(-m // step) * step


def empty_rows(
    shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """An uninitialised tensor of ``shape`` ([M, ...]) whose storage holds
    ``row_bucket(M)`` rows: a linear reading it pads it without a copy
    (``onednn_linear.pad_rows``). The rows past M are never written or read as values."""
    m = shape[0]
    bucket = row_bucket(m)
    if bucket == m or torch.device(device).type != "cpu":
        return torch.empty(shape, dtype=dtype, device=device)
    return torch.empty((bucket, *shape[1:]), dtype=dtype, device=device)[:m]
