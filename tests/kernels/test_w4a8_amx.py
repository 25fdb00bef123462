"""The W4A8 tile layout (kernels/w4a8_amx.py) and the two kernels that read it, AMX-INT8
tiles and AVX512-VNNI vectors (kernels/w4a8_vnni.py), each where the host has it: their
products against the rounded-input reference, a row's bits in any batch, bf16 rows, and
the shapes they leave to others."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from actorllm.kernels import w4a8_amx, w4a8_vnni
from tests.kernels.test_quant_gemm import _a8_reference, _weights

KERNELS = [
    pytest.param(w4a8_amx, id="amx", marks=pytest.mark.skipif(
        not w4a8_amx.available(), reason="no AMX-INT8 tiles on this host (detected)")),
    pytest.param(w4a8_vnni, id="vnni", marks=pytest.mark.skipif(
        not w4a8_vnni.available(), reason="no AVX512-VNNI on this host (detected)")),
]  # fmt: skip


def _run(kernel: Any, x: torch.Tensor, q: torch.Tensor, s: torch.Tensor, off: torch.Tensor,
         gs: int, bias: torch.Tensor | None) -> torch.Tensor | None:  # fmt: skip
    packed = w4a8_amx.tile_layout(q)
    return kernel.linear(x, packed, s.t().contiguous(), off.t().contiguous(), gs, bias)


def test_the_tile_layout_keeps_every_code_and_inverts() -> None:
    g = torch.Generator().manual_seed(0)
    q = torch.randint(0, 16, (48, 192), dtype=torch.uint8, generator=g)
    packed = w4a8_amx.tile_layout(q)
    assert packed.shape == (48, 96) and packed.dtype == torch.uint8
    assert torch.equal(w4a8_amx.untile(packed), q)
    assert torch.equal(w4a8_amx.untile(packed[16:32]), q[16:32])  # a tile's rows are its own
    # Step 0 of tile 0, tile row 1, output row 2: positions 4..7 are columns 8, 10, 12, 14
    # (the step's even columns come first) in the low nibbles of packed row 1.
    b = packed[:16].reshape(-1)[:512].view(8, 64)
    assert [int(v) & 0xF for v in b[1, 8:12]] == [int(q[2, c]) for c in (8, 10, 12, 14)]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize(
    ("gs", "i", "o", "m"),
    [
        (128, 512, 48, 1),  # GPTQ / AWQ decode, an odd number of column tiles
        (128, 384, 32, 17),  # two row tiles, the second partial
        (64, 256, 64, 40),  # more than 32 rows: K unpacked once, row pairs over it
        (256, 1024, 80, 33),
        (1024, 2048, 16, 2),  # a group of 4 blocks of 256
        (128, 256, 32, 9),  # the vector kernel: a pass of 8 rows, then one
    ],
)
def test_products_of_rounded_inputs(kernel: Any, gs: int, i: int, o: int, m: int) -> None:
    g = torch.Generator().manual_seed(gs + i + m)
    q, s, off = _weights(4, gs, i, o, g)
    bias = torch.randn(o, generator=g)
    x = torch.randn(m, i, generator=g)
    x[0, : min(gs, 256)] = 0.0  # an all-zero block
    w = (q.view(o, i // gs, gs).float() * s[..., None] + off[..., None]).view(o, i)
    out = _run(kernel, x, q, s, off, gs, bias)
    assert out is not None
    torch.testing.assert_close(out, _a8_reference(x, w, gs) + bias, rtol=1e-5, atol=5e-6)
    # A wrong code layout (the row kernel's rows, read as tiles) is far off.
    wrong = kernel.linear(x, (q[:, 0::2] | (q[:, 1::2] << 4)).contiguous(),
                            s.t().contiguous(), off.t().contiguous(), gs, bias)  # fmt: skip
    assert wrong is not None and not torch.allclose(wrong, out, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_row_has_the_same_bits_in_any_batch(kernel: Any) -> None:
    """Alone, among 20 rows (two row tiles) and among 70 (prefill's loop): one result."""
    g = torch.Generator().manual_seed(1)
    q, s, off = _weights(4, 128, 384, 48, g)
    x = torch.randn(70, 384, generator=g)
    alone = _run(kernel, x[3:4].clone(), q, s, off, 128, None)
    assert alone is not None
    for rows in (20, 70):
        batch = _run(kernel, x[:rows].contiguous(), q, s, off, 128, None)
        assert batch is not None and torch.equal(batch[3:4], alone)


def test_shapes_it_does_not_take() -> None:
    assert w4a8_amx.takes(32, 256, 128) and w4a8_amx.takes(16, 1024, 1024)
    assert not w4a8_amx.takes(40, 256, 128)  # output rows not whole tiles
    assert not w4a8_amx.takes(32, 256, 32)  # GGUF-size groups
    assert not w4a8_amx.takes(32, 96, 96)
    x = torch.randn(2, 256)
    one = torch.ones(256 // 32, 24)
    packed = torch.zeros(24, 128, dtype=torch.uint8)
    for kernel in (w4a8_amx, w4a8_vnni):  # (None too where the host has neither)
        assert kernel.linear(x, packed, one, one, 32, None) is None


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("m", [3, 40])
def test_bfloat16_in_and_out_are_the_float32_results_rounded(kernel: Any, m: int) -> None:
    """A bf16 model's rows are read and its outputs written as bf16 by the kernel itself:
    the bits of its float32 copy's result rounded by torch."""
    g = torch.Generator().manual_seed(m)
    q, s, off = _weights(4, 128, 256, 32, g)
    bias = torch.randn(32, generator=g)
    x = torch.randn(m, 256, generator=g).to(torch.bfloat16)
    out = _run(kernel, x, q, s, off, 128, bias)
    ref = _run(kernel, x.float(), q, s, off, 128, bias)
    assert out is not None and ref is not None and out.dtype == torch.bfloat16
    assert torch.equal(out, ref.to(torch.bfloat16))
