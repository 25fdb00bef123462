"""The Triton fused MoE against the torch reference at tiny shapes (the interpreter on CPU)."""

from __future__ import annotations

import pytest
import torch

from actorllm.kernels import moe as ref
from actorllm.kernels.triton import moe as tk
from tests.kernels.conftest import atol

DevDtype = tuple[torch.device, torch.dtype]


@pytest.mark.parametrize(
    ("t", "e", "k", "h", "i"),
    [(1, 4, 2, 16, 16), (9, 4, 2, 40, 24), (21, 8, 3, 32, 48), (5, 3, 1, 16, 8)],
)
def test_matches_reference(dev_dtype: DevDtype, t: int, e: int, k: int, h: int, i: int) -> None:
    device, dtype = dev_dtype
    g = torch.Generator().manual_seed(t + e)
    x = torch.randn(t, h, generator=g)
    w13 = torch.randn(e, 2 * i, h, generator=g) / h**0.5
    w2 = torch.randn(e, h, i, generator=g) / i**0.5
    weights, ids = ref.route_topk(torch.randn(t, e, generator=g), k, renormalize=True)
    args = [a.to(device) for a in (x, w13, w2)]
    args = [a.to(dtype) for a in args]
    got = tk.fused_moe(*args, weights.to(device), ids.to(device))
    want = ref.fused_moe(*args, weights.to(device), ids.to(device))
    assert got.shape == x.shape and got.dtype == dtype
    torch.testing.assert_close(got, want, atol=atol(dtype) * 4, rtol=1e-2)


def test_biases_and_swigluoai_match_reference(dev_dtype: DevDtype) -> None:
    """gpt-oss's experts: biases on both projections and the clamped SwiGLU."""
    device, dtype = dev_dtype
    t, e, k, h, i = 9, 4, 2, 32, 16
    g = torch.Generator().manual_seed(3)
    x = torch.randn(t, h, generator=g)
    w13 = torch.randn(e, 2 * i, h, generator=g) / h**0.5 * 4
    w2 = torch.randn(e, h, i, generator=g) / i**0.5
    b13, b2 = torch.randn(e, 2 * i, generator=g), torch.randn(e, h, generator=g)
    weights, ids = ref.route_topk(torch.randn(t, e, generator=g), k, renormalize=True)
    x, w13, w2, b13, b2 = (a.to(device, dtype) for a in (x, w13, w2, b13, b2))
    kw = dict(w13_bias=b13, w2_bias=b2, swiglu_limit=2.0, swiglu_alpha=1.702)
    args = (x, w13, w2, weights.to(device), ids.to(device), "swigluoai")
    got = tk.fused_moe(*args, **kw)  # type: ignore[arg-type]
    want = ref.fused_moe(*args, **kw)  # type: ignore[arg-type]
    torch.testing.assert_close(got, want, atol=atol(dtype) * 4, rtol=1e-2)


def test_alignment_pads_each_expert_to_whole_tiles() -> None:
    # pairs 0..5; expert 0: pairs 1, 2; expert 1: 5; expert 2: 0, 3, 4
    ids = torch.tensor([[2, 0], [0, 2], [2, 1]], dtype=torch.int32)
    pairs, tiles = tk.align_by_expert(ids, 4, block_m=4)
    assert pairs.shape[0] == 6 + 4 * 3 + 2  # T*K + E*(BM-1), rounded up to BM
    pad = 6
    assert pairs.tolist()[:12] == [1, 2, pad, pad, 5, pad, pad, pad, 0, 3, 4, pad]
    assert set(pairs.tolist()[12:]) == {pad}
    assert tiles.tolist() == [0, 1, 2, -1, -1]


def test_rejects_inconsistent_shapes() -> None:
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match="inconsistent MoE shapes"):
        tk.fused_moe(
            x,
            torch.randn(2, 6, 8),
            torch.randn(2, 8, 4),
            torch.ones(2, 1),
            torch.zeros(2, 1, dtype=torch.long),
        )
