"""The AVX512-VNNI W4A8 kernel (kernels/w4a8_vnni.py) beyond what it shares with the tiles
(tests/kernels/test_w4a8_amx.py): every pass width gives a row the same bits, the tiles'
bits where a host has both, and a build without the path says so."""

from __future__ import annotations

import pytest
import torch

from actorllm.kernels import w4a8_amx, w4a8_vnni
from tests.kernels.test_quant_gemm import _weights

needs_vnni = pytest.mark.skipif(
    not w4a8_vnni.available(), reason="no AVX512-VNNI on this host (detected)"
)


def _args(gs: int, i: int, o: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A random 4-bit weight: (tile layout, scales [G, O], offsets [G, O])."""
    q, s, off = _weights(4, gs, i, o, torch.Generator().manual_seed(seed))
    return w4a8_amx.tile_layout(q), s.t().contiguous(), off.t().contiguous()


@needs_vnni
def test_every_pass_width_gives_a_row_the_same_bits() -> None:
    """Batches of 1 to 9 rows run passes of 1 to 8 rows (each its own compiled loop): the
    first rows' results are the same bits in all of them."""
    packed, s_t, off_t = _args(128, 512, 48, 3)
    x = torch.randn(9, 512, generator=torch.Generator().manual_seed(4))
    full = w4a8_vnni.linear(x, packed, s_t, off_t, 128, None)
    assert full is not None
    for m in range(1, 9):
        part = w4a8_vnni.linear(x[:m].contiguous(), packed, s_t, off_t, 128, None)
        assert part is not None and torch.equal(part, full[:m])


@pytest.mark.skipif(
    not (w4a8_vnni.available() and w4a8_amx.available()),
    reason="needs both AMX-INT8 tiles and AVX512-VNNI (detected)",
)
@pytest.mark.parametrize("m", [1, 8, 40])
def test_the_tiles_bits(m: int) -> None:
    """One weight, one process: either kernel may serve it, the numbers are one."""
    packed, s_t, off_t = _args(128, 384, 64, m)
    x = torch.randn(m, 384, generator=torch.Generator().manual_seed(m)).to(torch.bfloat16)
    bias = torch.randn(64)
    vec = w4a8_vnni.linear(x, packed, s_t, off_t, 128, bias)
    tiles = w4a8_amx.linear(x, packed, s_t, off_t, 128, bias)
    assert vec is not None and tiles is not None and torch.equal(vec, tiles)


def test_a_build_without_the_path_is_not_available(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(w4a8_vnni, "_BUILD_FLAGS", ("-DNO_W4A8_VNNI",))
    assert not w4a8_vnni.available()
    x = torch.randn(1, 128)
    packed, s_t, off_t = _args(128, 128, 16, 0)
    assert w4a8_vnni.linear(x, packed, s_t, off_t, 128, None) is None
