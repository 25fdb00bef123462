"""The native bf16 linear for few rows: a bf16 GEMM's arithmetic (float32 sums of exact
products, one rounding), the same bits for a row whatever else runs beside it."""

from __future__ import annotations

import pytest
import torch

from actorllm.kernels import bf16_linear, native

pytestmark = pytest.mark.skipif(
    bf16_linear._fn() is None or not native.enabled(), reason="no native build here"
)


def _exact(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    out = x.double() @ w.double().t()
    return out if bias is None else out + bias.double()


@pytest.mark.parametrize(
    ("m", "i", "o", "with_bias"),
    [(1, 16, 4, False), (1, 64, 7, True), (2, 48, 9, False), (3, 32, 5, True),
     (5, 1024, 66, True), (6, 80, 3, False), (11, 256, 13, True), (32, 128, 40, False)],
)  # fmt: skip
def test_within_one_rounding_of_the_exact_product(m: int, i: int, o: int, with_bias: bool) -> None:
    g = torch.Generator().manual_seed(m * 1000 + i + o)
    x = torch.randn(m, i, generator=g).to(torch.bfloat16)
    w = torch.randn(o, i, generator=g).to(torch.bfloat16)
    bias = torch.randn(o, generator=g) if with_bias else None
    out = bf16_linear.linear(x, w, bias)
    assert out is not None and out.dtype == torch.bfloat16 and out.shape == (m, o)
    # float32 sums of i products: a few float32 ulps of the magnitudes, then one rounding
    exact = _exact(x, w, bias)
    scale = (x.double().abs() @ w.double().abs().t()) * i * 2**-23
    err = (out.double() - exact).abs()
    assert bool((err <= exact.abs() * 2**-8 + scale).all())


def test_a_row_gets_the_same_bits_alone_and_in_any_batch() -> None:
    """What a speculative verify step relies on: rows decoded one at a time and the same
    rows verified together give identical outputs, for every tile the rows land in."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(bf16_linear.MAX_ROWS, 512, generator=g).to(torch.bfloat16)
    w = torch.randn(37, 512, generator=g).to(torch.bfloat16)
    bias = torch.randn(37, generator=g)
    alone = torch.cat([bf16_linear.linear(x[r : r + 1], w, bias) for r in range(len(x))])  # type: ignore[misc]
    for m in (2, 3, 5, 8, 13, bf16_linear.MAX_ROWS):
        for start in (0, 3):
            rows = x[start : start + m]
            got = bf16_linear.linear(rows, w, bias)
            assert got is not None
            assert torch.equal(got, alone[start : start + len(rows)]), (m, start)


def test_threads_do_not_change_the_result() -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(5, 1024, generator=g).to(torch.bfloat16)
    w = torch.randn(300, 1024, generator=g).to(torch.bfloat16)  # enough work for the team
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = bf16_linear.linear(x, w, None)
    finally:
        torch.set_num_threads(threads)
    both = bf16_linear.linear(x, w, None)
    assert one is not None and both is not None and torch.equal(one, both)


def test_calls_it_does_not_take_return_none() -> None:
    w = torch.zeros(4, 24, dtype=torch.bfloat16)
    assert bf16_linear.linear(torch.ones(1, 24, dtype=torch.bfloat16), w, None) is None  # I % 16
    w = torch.zeros(4, 32, dtype=torch.bfloat16)
    many = torch.ones(bf16_linear.MAX_ROWS + 1, 32, dtype=torch.bfloat16)
    assert bf16_linear.linear(many, w, None) is None
    assert bf16_linear.linear(torch.ones(1, 32), w, None) is None  # float32 input
