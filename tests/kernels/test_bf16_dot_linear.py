"""The AVX512-BF16 few-rows linear against the exact product of the same bfloat16 values:
within one bfloat16 rounding, at every row count its passes cover and ragged output
widths; a row's bits do not depend on the rows beside it. Runs only on a host with
AVX512-BF16."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from actorllm.kernels import bf16_dot_linear as dot
from actorllm.models import onednn_linear
from tests.helpers.linear_spies import spy_linears

pytestmark = pytest.mark.skipif(not dot.available(), reason="no AVX512-BF16 here")


def _exact(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    return F.linear(x.double(), w.double(), None if b is None else b.double())


@pytest.mark.parametrize(
    ("m", "k", "n"),
    [
        (1, 64, 48),  # one row, a ragged last block (16 of 32 columns)
        (5, 32, 100),  # a last block of 4 columns
        (12, 128, 64),  # one full pass of rows
        (13, 96, 32),  # two passes, the second of one row
        (32, 256, 96),
        (40, 1024, 72),  # four passes over each streamed block
    ],
)
@pytest.mark.parametrize("bias", [False, True])
def test_matches_the_exact_product(m: int, k: int, n: int, bias: bool) -> None:
    g = torch.Generator().manual_seed(m * 1000 + k + n)
    w = torch.randn(n, k, generator=g).to(torch.bfloat16)
    x = torch.randn(m, k, generator=g).to(torch.bfloat16)
    b = torch.randn(n, generator=g).to(torch.bfloat16) if bias else None
    out = dot.linear(x, dot.pack(w), n, b)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), _exact(x, w, b), atol=1e-3, rtol=2**-8)


def test_a_wrong_layout_is_caught() -> None:
    """The comparison above fails for a weight packed in another order (the columns of a
    block swapped pairwise): it can tell."""
    g = torch.Generator().manual_seed(1)
    w = torch.randn(32, 64, generator=g).to(torch.bfloat16)
    x = torch.randn(3, 64, generator=g).to(torch.bfloat16)
    wrong = dot.pack(w).view(32, 32, 2).flip(1).reshape(-1)  # [pairs, columns, 2]
    with pytest.raises(AssertionError):
        torch.testing.assert_close(
            dot.linear(x, wrong, 32, None).double(), _exact(x, w, None), atol=1e-3, rtol=2**-8
        )


def test_pack_layout() -> None:
    """Pair row p of block b, column c, element j holds w[32b + c, 2p + j]; columns past O
    are zero."""
    n, k = 40, 64
    w = torch.arange(n * k, dtype=torch.float32).reshape(n, k).to(torch.bfloat16)
    packed = dot.pack(w).view(2, k // 2, 32, 2)  # [b, p, c, j]
    for b, p, c, j in [(0, 0, 0, 1), (0, 31, 5, 0), (1, 7, 7, 1)]:
        assert packed[b, p, c, j] == w[32 * b + c, 2 * p + j]
    assert not packed[1, :, 8:].any()


def test_a_rows_bits_do_not_depend_on_its_batch() -> None:
    """Each row's sums run in one order whatever the rows beside it: a decode step of 30
    rows gives each row what it gets alone (a speculative verify, batch invariance)."""
    g = torch.Generator().manual_seed(2)
    w = torch.randn(96, 512, generator=g).to(torch.bfloat16)
    x = torch.randn(30, 512, generator=g).to(torch.bfloat16)
    packed = dot.pack(w)
    whole = dot.linear(x, packed, 96, None)
    for r in (0, 11, 12, 29):
        assert torch.equal(dot.linear(x[r : r + 1], packed, 96, None)[0], whole[r])


def test_shapes_it_does_not_take() -> None:
    assert not dot.takes(torch.zeros(8, 48, dtype=torch.bfloat16))  # input width 48
    assert not dot.takes(torch.zeros(8, 64))  # float32
    assert dot.takes(torch.zeros(8, 64, dtype=torch.bfloat16))


needs_dot_copies = pytest.mark.skipif(
    onednn_linear.few_rows_kernel() is not dot, reason="an AMX host keeps the AMX copy"
)


@needs_dot_copies
def test_decode_rows_take_the_kernel_and_prefill_rows_onednn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a CPU with AVX512-BF16 and no AMX a prepacked bf16 linear keeps a copy for the
    kernel: up to DOT_MAX_ROWS rows run on it, more on oneDNN, with the same values."""
    lin = nn.Linear(64, 96).to(torch.bfloat16)
    assert onednn_linear.prepack_linears(lin) == 1
    assert isinstance(lin, onednn_linear.OneDNNLinear) and lin.few_packed is not None
    calls = spy_linears(monkeypatch, dot, "dot")
    cap = onednn_linear.DOT_MAX_ROWS
    x = torch.randn(cap + 1, 64).to(torch.bfloat16)
    small, large = lin(x[:cap]), lin(x)
    assert calls == [("dot", cap), ("onednn", onednn_linear.row_bucket(cap + 1))]
    torch.testing.assert_close(small, large[:cap], atol=0.05, rtol=0.02)
    torch.testing.assert_close(small.double(), _exact(x[:cap], lin.weight, lin.bias),
                               atol=1e-3, rtol=2**-8)  # fmt: skip


@pytest.mark.parametrize(("k", "n"), [(256, 96), (768, 64), (1024, 96), (1536, 64), (3072, 64)])
@pytest.mark.parametrize("bias", [False, True])
def test_the_bits_of_onednns_product_at_any_row_count(k: int, n: int, bias: bool) -> None:
    """A linear's rows past the kernel's 32 run on oneDNN's prepacked matmul, which sums K
    in blocks (512 values up to K = 1,024, else 1,024): the kernel sums in the same order,
    so a row has the same bits at 1-32 rows (this kernel) and among 300 (oneDNN), as a
    request replayed after a crash needs. oneDNN takes AMX tiles where the host has them,
    another order: there the comparison is skipped."""
    from actorllm.kernels.cpu_features import amx_bf16

    if amx_bf16() or not onednn_linear.supported_dtypes():
        pytest.skip("oneDNN takes another path here (AMX tiles, or no oneDNN)")
    g = torch.Generator().manual_seed(k + n)
    model = nn.Sequential(nn.Linear(k, n, bias=bias)).bfloat16()
    with torch.no_grad():
        model[0].weight.copy_(torch.randn(n, k, generator=g) * 4 / k**0.5)
        if bias:
            model[0].bias.copy_(torch.randn(n, generator=g))
    onednn_linear.prepack_linears(model)
    linear = model[0]
    assert isinstance(linear, onednn_linear.OneDNNLinear) and linear.few_kernel is dot
    x = torch.randn(300, k, generator=g).to(torch.bfloat16)
    with torch.no_grad():
        many = linear(x)  # oneDNN
        for m in (1, 5, 12, 32):
            assert torch.equal(linear(x[:m]), many[:m]), m
