"""The Triton LoRA shrink/expand against the torch reference at tiny shapes (the
interpreter on CPU; bf16/fp16 on a GPU): mixed batches with base rows, packed slices,
slots out of order, inactive slots."""

from __future__ import annotations

import pytest
import torch

from actorllm.kernels.lora import LoRASegments, add_lora, block_b
from actorllm.kernels.triton import lora as tk
from tests.kernels.conftest import atol

DevDtype = tuple[torch.device, torch.dtype]


def _groups(row_slots: list[int], device: torch.device) -> list[tuple[int, torch.Tensor | None]]:
    return [
        (s, torch.tensor([i for i, v in enumerate(row_slots) if v == s], device=device))
        for s in sorted({s for s in row_slots if s >= 0})
    ]


@pytest.mark.parametrize(
    ("row_slots", "sizes", "rank"),
    [
        ([0, -1, 2, 1, 0, -1, 2, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], [40, 16, 16], 8),
        ([1, 1, 1, 1, 1], [24], 4),  # the whole step one adapter: no perm
        ([2, 2, 0, -1, 0], [32, 32], 16),
    ],
)
def test_matches_reference(
    dev_dtype: DevDtype, row_slots: list[int], sizes: list[int], rank: int
) -> None:
    device, dtype = dev_dtype
    g = torch.Generator().manual_seed(len(row_slots))
    t, k, slots = len(row_slots), 48, 3
    x = torch.randn(t, k, generator=g).to(device, dtype)
    a = (torch.randn(slots, len(sizes) * rank, k, generator=g) / k**0.5).to(device, dtype)
    bs = [(torch.randn(slots, n, rank, generator=g) / rank**0.5).to(device, dtype) for n in sizes]
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    base = torch.randn(t, sum(sizes), generator=g).to(device, dtype)
    want = base.float().clone()
    add_lora(
        want, x.float(), a.float(), [b.float() for b in bs], starts, _groups(row_slots, device)
    )
    got = base.clone()
    seg = LoRASegments.build(row_slots, device)
    tk.add_lora_segments(got, x, a, block_b(bs, starts, sum(sizes)), starts, seg)
    assert got.dtype == dtype
    torch.testing.assert_close(got.float(), want, atol=atol(dtype) * 4, rtol=1e-2)
    for i, s in enumerate(row_slots):
        if s < 0:
            assert torch.equal(got[i], base[i])


def test_inactive_slots_add_nothing(dev_dtype: DevDtype) -> None:
    device, dtype = dev_dtype
    row_slots = [0, 1, 2, 0, 1, 2]
    g = torch.Generator().manual_seed(7)
    x = torch.randn(6, 16, generator=g).to(device, dtype)
    a = torch.randn(3, 4, 16, generator=g).to(device, dtype)
    b = torch.randn(3, 8, 4, generator=g).to(device, dtype)
    want = torch.zeros(6, 8, device=device)
    groups = [gr for gr in _groups(row_slots, device) if gr[0] != 1]
    add_lora(want, x.float(), a.float(), [b.float()], [0], groups)
    got = torch.zeros(6, 8, device=device, dtype=dtype)
    seg = LoRASegments.build(row_slots, device)
    tk.add_lora_segments(got, x, a, block_b([b], [0], 8), [0], seg, {0, 2})
    torch.testing.assert_close(got.float(), want, atol=atol(dtype) * 4, rtol=1e-2)
    assert got[[1, 4]].abs().sum() == 0


def test_the_torch_path_on_cpu() -> None:
    from actorllm.kernels.lora import add_lora_segments
    from actorllm.models.lora_layers import lora_impl

    assert lora_impl(torch.device("cpu")) is add_lora_segments


@pytest.mark.cuda
def test_the_triton_kernels_on_cuda() -> None:
    from actorllm.models.lora_layers import lora_impl

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    assert lora_impl(torch.device("cuda")) is tk.add_lora_segments
