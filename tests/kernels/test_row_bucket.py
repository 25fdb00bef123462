"""The row counts CPU linears run at, activations allocated with room for them, and the
padding that reads that room instead of copying."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from actorllm.kernels.row_bucket import EXACT_ROWS_MAX, empty_rows, row_bucket
from actorllm.models.onednn_linear import pad_rows, prepack_linears, supported_dtypes


def test_row_bucket_bounds_the_shapes() -> None:
    for m in range(1, EXACT_ROWS_MAX + 1):
        assert row_bucket(m) == m
    buckets = set()
    for m in range(EXACT_ROWS_MAX + 1, 8193):
        b = row_bucket(m)
        assert m <= b <= m * 1.125
        assert row_bucket(b) == b  # a bucket is its own bucket
        buckets.add(b)
    # 8 per power of two from 16 to 8192 (9 octaves), and 8192 itself
    assert len(buckets) <= 8 * 9 + 1


@pytest.mark.parametrize("m", [5, 16, 17, 33, 1801])
def test_empty_rows_has_room_and_pad_rows_reads_it_without_a_copy(m: int) -> None:
    x = empty_rows((m, 24), torch.float32)
    assert x.shape == (m, 24) and x.is_contiguous()
    x.copy_(torch.randn(m, 24))
    padded = pad_rows(x)
    assert padded.shape == (row_bucket(m), 24)
    assert padded.data_ptr() == x.data_ptr()  # no copy: the storage's own rows
    torch.testing.assert_close(padded[:m], x)


def test_pad_rows_copies_where_the_storage_ends_at_m() -> None:
    x = torch.randn(17, 24)  # no room past row 17
    padded = pad_rows(x)
    assert padded.shape == (row_bucket(17), 24) and padded.data_ptr() != x.data_ptr()
    torch.testing.assert_close(padded[:17], x)
    assert not padded[17:].any()  # zero rows appended


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_garbage_past_the_rows_never_reaches_a_linears_output(dtype: torch.dtype) -> None:
    """The rows past M hold whatever the allocator left (NaN here): a product's rows are
    independent, so the first M rows of the output equal those of a clean input's."""
    if dtype not in supported_dtypes():
        pytest.skip(f"no oneDNN {dtype} path on this host")
    lin = nn.Linear(24, 40).to(dtype)
    assert prepack_linears(lin) == 1
    m = 37  # bucketed to 40; more than AMX's rows, so oneDNN's product serves it
    x = empty_rows((m, 24), dtype)
    full = x.as_strided((row_bucket(m), 24), (24, 1))
    full.fill_(float("nan"))
    clean = torch.randn(m, 24).to(dtype)
    x.copy_(clean)
    with torch.no_grad():
        got, want = lin(x), lin(clean.clone())
    assert got.shape == (m, 40) and not got.isnan().any()
    torch.testing.assert_close(got, want, rtol=0, atol=0)
