"""LoRA shrink/expand: the segmented fast path equals the per-slice torch reference on
mixed batches (base rows in no segment, slots in any order, packed projections), and the
per-step segments sort rows by slot."""

from __future__ import annotations

import pytest
import torch

from actorllm.kernels.lora import LoRASegments, add_lora, add_lora_segments, block_b


def _case(seed: int, t: int, k: int, sizes: list[int], slots: int, r: int) -> tuple:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, k, generator=g)
    a = torch.randn(slots, len(sizes) * r, k, generator=g) / k**0.5
    bs = [torch.randn(slots, n, r, generator=g) / r**0.5 for n in sizes]
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return x, a, bs, starts, block_b(bs, starts, sum(sizes))


def _groups(row_slots: list[int]) -> list[tuple[int, torch.Tensor | None]]:
    out: list[tuple[int, torch.Tensor | None]] = []
    for s in sorted({s for s in row_slots if s >= 0}):
        out.append((s, torch.tensor([i for i, v in enumerate(row_slots) if v == s])))
    return out


@pytest.mark.parametrize(
    "row_slots",
    [
        [0, -1, 2, 1, 0, -1, 2, 2, 1],  # base rows interleaved with three slots
        [1, 1, 1, 1],  # one adapter for the whole step: no gather, no scatter
        [2, 2, 0, 0, 0],  # all adapter rows, out of slot order
        [-1, -1, 3],
    ],
)
@pytest.mark.parametrize("sizes", [[24], [16, 8, 8]])
def test_segments_equal_the_reference(row_slots: list[int], sizes: list[int]) -> None:
    x, a, bs, starts, b = _case(len(row_slots), len(row_slots), 32, sizes, 4, 4)
    base = torch.randn(len(row_slots), sum(sizes))
    want, got = base.clone(), base.clone()
    add_lora(want, x, a, bs, starts, _groups(row_slots))
    seg = LoRASegments.build(row_slots, torch.device("cpu"))
    add_lora_segments(got, x, a, b, starts, seg)
    torch.testing.assert_close(got, want)
    for i, s in enumerate(row_slots):
        if s < 0:
            assert torch.equal(got[i], base[i])  # base rows: untouched


def test_inactive_slots_add_nothing() -> None:
    x, a, bs, starts, b = _case(3, 6, 16, [8], 3, 2)
    row_slots = [0, 1, 2, 0, 1, 2]
    want, got = torch.zeros(6, 8), torch.zeros(6, 8)
    add_lora(want, x, a, bs, starts, [g for g in _groups(row_slots) if g[0] != 1])
    add_lora_segments(got, x, a, b, starts, LoRASegments.build(row_slots, torch.device("cpu")),
                      {0, 2})  # fmt: skip
    torch.testing.assert_close(got, want)
    assert got[[1, 4]].abs().sum() == 0


def test_bf16_output_with_float32_math() -> None:
    x, a, bs, starts, b = _case(5, 5, 16, [8, 8], 2, 4)
    seg = LoRASegments.build([1, 0, -1, 1, 0], torch.device("cpu"))
    want = torch.zeros(5, 16)
    add_lora(want, x.bfloat16().float(), a, bs, starts, _groups([1, 0, -1, 1, 0]))
    got = torch.zeros(5, 16, dtype=torch.bfloat16)
    add_lora_segments(got, x.bfloat16(), a, b, starts, seg)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=1e-2)


@pytest.mark.parametrize(
    "row_slots",
    [
        [0, -1, 2, 1, 0, 3, 2, 2, 1, 3],  # every slot, base rows between
        [2, 2, 0, -1, 0, 0],  # a subset of the slots, out of order
    ],
)
def test_dense_half_precision_path_equals_the_reference(row_slots: list[int]) -> None:
    """bf16 math (a CPU with hardware bf16): every row through every step slot's A, each
    keeping its own slot's block; base rows come out exactly as they went in."""
    x, a, bs, starts, b = _case(7, len(row_slots), 32, [16, 8, 8], 4, 4)
    x, a, b = x.bfloat16(), a.bfloat16(), b.bfloat16()
    bs = [t.bfloat16().float() for t in bs]
    base = torch.randn(len(row_slots), 32).bfloat16()
    want = base.float()
    add_lora(want, x.float(), a.float(), bs, starts, _groups(row_slots))
    got = base.clone()
    seg = LoRASegments.build(row_slots, torch.device("cpu"), half=True)
    assert seg.one_hot is not None  # the dense path
    add_lora_segments(got, x, a, b, starts, seg)
    torch.testing.assert_close(got.float(), want, atol=3e-2, rtol=2e-2)
    for i, s in enumerate(row_slots):
        if s < 0:
            assert torch.equal(got[i], base[i])


def test_segments_sort_rows_by_slot() -> None:
    seg = LoRASegments.build([2, -1, 0, 2, 0], torch.device("cpu"))
    assert seg.perm is not None and seg.perm.tolist() == [2, 4, 0, 3]
    assert seg.segments == ((0, 0, 2), (2, 2, 4))
    assert seg.table.tolist() == [[0, 2], [0, 2], [2, 2]] and seg.max_len == 2
    assert LoRASegments.build([1, 1, 1], torch.device("cpu")).perm is None


def test_padded_layout() -> None:
    seg = LoRASegments.build([2, -1, 0, 2, 0, 2], torch.device("cpu"))
    assert seg.pad_index.tolist() == [2, 4, 0, 0, 3, 5]  # slot 0 padded with row 0
    assert seg.pad_mask is not None and seg.pad_mask.flatten().tolist() == [1, 1, 0, 1, 1, 1]
    assert LoRASegments.build([0, 1, 1, 0], torch.device("cpu")).pad_mask is None
