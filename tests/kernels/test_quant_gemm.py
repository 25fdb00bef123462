"""The native weight-only GEMM against the dequantized weight's float32 product."""

from __future__ import annotations

import pytest
import torch

from actorllm.kernels import native, quant_gemm
from actorllm.models.quant.linear import pack_rows

pytestmark = pytest.mark.skipif(
    quant_gemm._fn() is None or not native.enabled(), reason="no native build here"
)


@pytest.mark.parametrize(
    ("bits", "gs", "i", "o", "m"),
    [
        (4, 32, 64, 48, 1),
        (4, 128, 512, 40, 5),
        (8, 64, 128, 24, 16),
        (4, 1024, 2048, 8, 2),
        (8, 96, 96, 8, 3),
        (8, 16, 256, 8, 1),  # GGUF Q6_K's groups of 16
    ],
)
def test_matches_the_dequantized_product(bits: int, gs: int, i: int, o: int, m: int) -> None:
    g = torch.Generator().manual_seed(bits * gs + m)
    q = torch.randint(0, 2**bits, (o, i), dtype=torch.uint8, generator=g)
    scales = torch.rand(o, i // gs, generator=g) * 0.01
    offsets = -torch.randint(0, 2**bits, (o, i // gs), generator=g).float() * scales
    bias = torch.randn(o, generator=g)
    x = torch.randn(m, i, generator=g)
    w = q.view(o, i // gs, gs).float() * scales[..., None] + offsets[..., None]  # [O, G, gs]
    ref = x @ w.view(o, i).t() + bias
    out = quant_gemm.wq_linear(x, pack_rows(q, bits), bits, scales, offsets, gs, bias)
    assert out is not None
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_calls_it_does_not_take_return_none() -> None:
    q = torch.zeros(4, 24, dtype=torch.uint8)  # I = 24: not a multiple of 16
    s, z = torch.ones(4, 1), torch.zeros(4, 1)
    assert quant_gemm.wq_linear(torch.ones(1, 24), q, 8, s, z, 24, None) is None
    many = torch.ones(quant_gemm.MAX_ROWS + 1, 32)
    assert (
        quant_gemm.wq_linear(many, torch.zeros(4, 16, dtype=torch.uint8), 4, s, z, 32, None) is None
    )


@pytest.mark.parametrize("m", [1, 5, 16])
def test_i8_gemm_is_exact_for_quantized_rows_and_any_weight(m: int) -> None:
    """Inputs as quantize_rows makes them (no -128; the SIMD path), weights with -128."""
    g = torch.Generator().manual_seed(m)
    q = torch.randint(-127, 128, (m, 160), dtype=torch.int8, generator=g)
    w = torch.randint(-128, 128, (24, 160), dtype=torch.int8, generator=g)
    w[0] = -128
    q[0, :] = -127
    out = quant_gemm.i8_gemm(q, w)
    assert out is not None
    assert torch.equal(out.long(), q.long() @ w.long().t())
