"""oneDNN-prepacked CPU linears: same results as F.linear, repacked when the weight is
rewritten, plain nn.Linear behaviour (state dict, isinstance) kept."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from actorllm.models import onednn_linear
from actorllm.models.onednn_linear import (
    OneDNNLinear,
    prepack_linears,
    row_bucket,
    supported_dtypes,
)


@pytest.fixture(params=["native", "widened"])
def bf16_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """bfloat16 linears as this host runs them, and widened to float32 (what a host without
    native bf16 runs; forced here so every host tests it)."""
    if request.param == "widened":
        monkeypatch.setattr(onednn_linear, "native_bf16", lambda: False)
    return str(request.param)


@pytest.mark.usefixtures("bf16_mode")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 7, 128, 300])
def test_matches_f_linear(dtype: torch.dtype, rows: int) -> None:
    if dtype not in supported_dtypes():
        pytest.skip(f"no oneDNN {dtype} path on this host")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(96, 160, bias=False), nn.Linear(160, 48)).to(dtype)
    x = torch.randn(rows, 96).to(dtype)
    want = model(x)
    assert prepack_linears(model) == 2
    assert all(isinstance(m, OneDNNLinear) for m in model)
    with torch.inference_mode():
        got = model(x)
        got3 = model(x.view(1, rows, 96))  # leading dims kept
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    torch.testing.assert_close(got3[0], got, atol=0, rtol=0)
    assert set(model.state_dict()) == {"0.weight", "1.weight", "1.bias"}


def test_repacks_after_an_in_place_write() -> None:
    if torch.float32 not in supported_dtypes():
        pytest.skip("no oneDNN on this host")
    lin = nn.Linear(32, 16, bias=False)
    prepack_linears(lin)
    x = torch.randn(4, 32)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(16, 32))  # a reload / weight update
    torch.testing.assert_close(lin(x), F.linear(x, lin.weight), atol=1e-5, rtol=1e-5)


def test_skips_when_the_copies_would_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    from actorllm.models import onednn_linear

    monkeypatch.setattr(onednn_linear, "_free_memory_bytes", lambda: 1000)
    lin = nn.Linear(32, 16)  # 2 KB of fp32 weight > half of 1000 bytes
    assert prepack_linears(lin) == 0
    assert type(lin) is nn.Linear


def test_widened_bf16_is_a_bf16_gemm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Widened (no native bf16): a bfloat16 output within one bfloat16 rounding of the exact
    float32 product of the same bfloat16 values, bias included; the packed copy is float32
    and a rewritten bias is picked up."""
    if torch.bfloat16 not in supported_dtypes():
        pytest.skip("no oneDNN on this host")
    monkeypatch.setattr(onednn_linear, "native_bf16", lambda: False)
    torch.manual_seed(1)
    lin = nn.Linear(64, 40).to(torch.bfloat16)
    x = torch.randn(9, 64).to(torch.bfloat16)
    assert prepack_linears(lin) == 1 and isinstance(lin, OneDNNLinear)
    assert lin.packed is not None and lin.packed.dtype == torch.float32
    exact = F.linear(x.double(), lin.weight.double(), lin.bias.double())
    got = lin(x)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.double(), exact, atol=1e-5, rtol=2**-8)
    with torch.no_grad():
        lin.bias.add_(1.0)  # only the bias changes: the widened copy follows
    torch.testing.assert_close(
        lin(x).double(), F.linear(x.double(), lin.weight.double(), lin.bias.double()),
        atol=1e-5, rtol=2**-8,
    )  # fmt: skip


def test_widened_bf16_few_rows_read_the_bf16_weight(monkeypatch: pytest.MonkeyPatch) -> None:
    """Up to bf16_linear.MAX_ROWS rows (decode, a speculative verify) run the native kernel
    on the bfloat16 weight (half the bytes of the widened copy); more rows take the widened
    one; without the kernel, one row takes torch's bfloat16 product. All are bfloat16 GEMMs
    of the same values: within one rounding of the exact product."""
    if torch.bfloat16 not in supported_dtypes():
        pytest.skip("no oneDNN on this host")
    from actorllm.kernels import bf16_linear

    monkeypatch.setattr(onednn_linear, "native_bf16", lambda: False)
    torch.manual_seed(2)
    lin = nn.Linear(64, 40).to(torch.bfloat16)
    assert prepack_linears(lin) == 1
    calls = _spy_onednn_rows(monkeypatch)
    many = bf16_linear.MAX_ROWS + 1
    x = torch.randn(many, 64).to(torch.bfloat16)
    exact = F.linear(x.double(), lin.weight.double(), lin.bias.double())
    native = bf16_linear._fn() is not None
    one, two, all_rows = lin(x[:1]), lin(x[:2]), lin(x)
    assert calls == ([row_bucket(many)] if native else [2, row_bucket(many)])
    if native:  # the kernel is batch invariant: a row alone equals it beside others
        assert torch.equal(one, two[:1])
    for got, n in ((one, 1), (two, 2), (all_rows, many)):
        torch.testing.assert_close(got.double(), exact[:n], atol=1e-5, rtol=2**-8)
    monkeypatch.setattr(bf16_linear, "_fn", lambda: None)  # no native build
    calls.clear()
    assert torch.equal(lin(x[:1]), F.linear(x[:1], lin.weight, lin.bias))
    lin(x[:2])
    assert calls == [2]


def test_no_room_for_copies_widened_bf16_still_decodes_natively(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Copies that would not fit are not made; a widened bf16 linear still takes the native
    kernel for few rows (it reads the bf16 weight itself) and torch's product for more; a
    float32 linear stays a plain nn.Linear."""
    if torch.bfloat16 not in supported_dtypes():
        pytest.skip("no oneDNN on this host")
    from actorllm.kernels import bf16_linear

    monkeypatch.setattr(onednn_linear, "native_bf16", lambda: False)
    monkeypatch.setattr(onednn_linear, "_free_memory_bytes", lambda: 1000)
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(64, 48).to(torch.bfloat16), nn.Linear(48, 16))
    assert prepack_linears(model) == 1
    lin = model[0]
    assert isinstance(lin, OneDNNLinear) and type(model[1]) is nn.Linear
    assert lin.packed is None and lin.widened
    calls: list[int] = []
    real = bf16_linear.linear

    def spy(rows: torch.Tensor, *args: object) -> torch.Tensor | None:
        calls.append(rows.shape[0])
        return real(rows, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(bf16_linear, "linear", spy)
    many = bf16_linear.MAX_ROWS + 1
    x = torch.randn(many, 64).to(torch.bfloat16)
    exact = F.linear(x.double(), lin.weight.double(), lin.bias.double())
    few, all_rows = lin(x[:3]), lin(x)
    assert calls == [3, many]
    for got, n in ((few, 3), (all_rows, many)):
        torch.testing.assert_close(got.double(), exact[:n], atol=1e-5, rtol=2**-8)


def test_rows_run_at_their_bucket(monkeypatch: pytest.MonkeyPatch) -> None:
    """oneDNN multiplies a bucketed row count (its primitive, made once per shape, is
    reused by the nearby counts) and the padding rows never reach the output."""
    if torch.float32 not in supported_dtypes():
        pytest.skip("no oneDNN on this host")
    torch.manual_seed(0)
    lin = nn.Linear(24, 40)
    prepack_linears(lin)
    calls = _spy_onednn_rows(monkeypatch)
    x = torch.randn(300, 24)
    got = lin(x)
    assert calls == [row_bucket(300)] and row_bucket(300) > 300
    assert got.shape == (300, 40) and got.is_contiguous()
    torch.testing.assert_close(got, F.linear(x, lin.weight, lin.bias), atol=1e-5, rtol=1e-5)


def _spy_onednn_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The row count of each oneDNN product from now on."""
    calls: list[int] = []
    linear_pointwise = torch.ops.mkldnn._linear_pointwise

    def spy(rows: torch.Tensor, *args: object) -> torch.Tensor:
        calls.append(rows.shape[0])
        return linear_pointwise(rows, *args)

    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", spy)
    return calls
