"""The AMX bf16 linear against the exact product of the same bfloat16 values: within one
bfloat16 rounding, at every row count and width the kernel's paths cover (one or two row
tiles, several passes over a streamed weight, grouped blocks for large inputs, ragged
output widths). Runs only on a host with AMX-BF16."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from actorllm.kernels import amx_linear
from actorllm.models import onednn_linear
from actorllm.models.onednn_linear import (
    AMX_MAX_ROWS,
    OneDNNLinear,
    amx_max_rows,
    prepack_linears,
    row_bucket,
)
from tests.helpers.linear_spies import spy_linears

pytestmark = pytest.mark.skipif(not amx_linear.available(), reason="no AMX-BF16 here")


def _exact(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    return F.linear(x.double(), w.double(), None if b is None else b.double())


@pytest.mark.parametrize(
    ("m", "k", "n"),
    [
        (1, 64, 48),  # one row, a ragged last block
        (5, 32, 100),
        (16, 128, 64),  # one full row tile
        (17, 96, 32),  # two row tiles, the second of one row
        (32, 256, 96),
        (70, 64, 40),  # three passes over each streamed block
        (600, 1024, 72),  # x over 1 MiB: grouped blocks
    ],
)
@pytest.mark.parametrize("bias", [False, True])
def test_matches_the_exact_product(m: int, k: int, n: int, bias: bool) -> None:
    g = torch.Generator().manual_seed(m * 1000 + k + n)
    w = torch.randn(n, k, generator=g).to(torch.bfloat16)
    x = torch.randn(m, k, generator=g).to(torch.bfloat16)
    b = torch.randn(n, generator=g).to(torch.bfloat16) if bias else None
    out = amx_linear.linear(x, amx_linear.pack(w), n, b)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), _exact(x, w, b), atol=1e-3, rtol=2**-8)


def test_pack_layout() -> None:
    """Tile t of step s of block b, row r, element 2c + j holds w[32b + 16t + c, 32s + 2r + j];
    columns past O are zero."""
    n, k = 40, 64
    w = torch.arange(n * k, dtype=torch.float32).reshape(n, k).to(torch.bfloat16)
    packed = amx_linear.pack(w).view(2, k // 32, 2, 16, 16, 2)  # [b, s, t, r, c, j]
    for b, s, t, r, c, j in [(0, 0, 0, 0, 0, 1), (0, 1, 1, 15, 3, 0), (1, 0, 0, 7, 7, 1)]:
        assert packed[b, s, t, r, c, j] == w[32 * b + 16 * t + c, 32 * s + 2 * r + j]
    assert not packed[1, :, :, :, 8:, :].any() and not packed[1, :, 1].any()


def test_strided_input_is_read_as_rows() -> None:
    w = torch.randn(64, 64).to(torch.bfloat16)
    x = torch.randn(8, 128).to(torch.bfloat16)[:, ::2]  # a view with row stride 128
    torch.testing.assert_close(
        amx_linear.linear(x, amx_linear.pack(w), 64, None), F.linear(x, w), atol=0.05, rtol=0.02
    )


def test_linears_take_it_where_the_width_allows() -> None:
    """A prepacked bf16 linear with an input width of a multiple of 32 gets an AMX copy;
    another width keeps oneDNN alone; both give F.linear's values and repack after a
    weight write."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(96, 64), nn.Linear(64, 48, bias=False), nn.Linear(48, 8))
    model = model.to(torch.bfloat16)
    x = torch.randn(3, 96).to(torch.bfloat16)
    want = model(x)
    assert prepack_linears(model) == 3
    kinds = [m.few_packed is not None for m in model if isinstance(m, OneDNNLinear)]
    assert kinds == [True, True, False]
    torch.testing.assert_close(model(x), want, atol=0.05, rtol=0.02)
    first = model[0]
    assert isinstance(first, OneDNNLinear)
    with torch.no_grad():
        first.weight.mul_(2.0)  # a weight update: the AMX copy follows
    torch.testing.assert_close(
        first(x).double(), _exact(x, first.weight, first.bias), atol=1e-3, rtol=2**-8
    )


def _spy_kernels(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    return spy_linears(monkeypatch, amx_linear, "amx")


@pytest.mark.parametrize(
    ("out", "inp", "cap"),
    [(40, 64, 128), (4096, 64, 64), (4104, 64, 32), (2048, 1024, 128), (2080, 1024, 96)],
)
def test_decode_rows_take_amx_and_prefill_rows_onednn(
    monkeypatch: pytest.MonkeyPatch, out: int, inp: int, cap: int
) -> None:
    """Up to amx_max_rows rows on the AMX copy: more for narrow weights."""
    assert amx_max_rows(out, inp) == cap
    lin = nn.Linear(inp, out).to(torch.bfloat16)
    assert prepack_linears(lin) == 1
    calls = _spy_kernels(monkeypatch)
    x = torch.randn(cap + 1, inp).to(torch.bfloat16)
    small, large = lin(x[:cap]), lin(x)
    # (oneDNN at the bucketed row count: onednn_linear.row_bucket)
    assert calls == [("amx", cap), ("onednn", row_bucket(cap + 1))]
    torch.testing.assert_close(small, large[:cap], atol=0.05, rtol=0.02)


def test_caps_of_real_weight_shapes() -> None:
    assert amx_max_rows(2048, 8192) == 128  # Llama-3.2-1B's down_proj
    assert amx_max_rows(16384, 2048) == 96  # its gate_up_proj
    assert amx_max_rows(151936, 1024) == 96  # Qwen3-0.6B's LM head
    assert amx_max_rows(1024, 3072) == 128  # its down_proj
    assert amx_max_rows(4096, 768) == 64  # the 75M shape's gate_up_proj
    assert amx_max_rows(32000, 768) == AMX_MAX_ROWS  # its LM head


def test_amx_copy_alone_where_two_would_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Room for one copy of each weight, not two: the AMX copy serves every row count."""
    lin = nn.Linear(64, 40).to(torch.bfloat16)  # 5120 bytes of weight
    monkeypatch.setattr(onednn_linear, "_free_memory_bytes", lambda: 2 * 6000)
    assert prepack_linears(lin) == 1
    assert isinstance(lin, OneDNNLinear) and lin.packed is None and lin.few_packed is not None
    calls = _spy_kernels(monkeypatch)
    x = torch.randn(AMX_MAX_ROWS + 8, 64).to(torch.bfloat16)
    out = lin(x)
    assert calls == [("amx", AMX_MAX_ROWS + 8)]
    torch.testing.assert_close(out.double(), _exact(x, lin.weight, lin.bias), atol=1e-3, rtol=2**-8)


def test_a_profiler_trace_names_the_product() -> None:
    """A ctypes call is invisible to torch.profiler: each product records a range."""
    w = torch.randn(32, 64).to(torch.bfloat16)
    x = torch.randn(2, 64).to(torch.bfloat16)
    packed = amx_linear.pack(w)
    with torch.profiler.profile() as prof:
        amx_linear.linear(x, packed, 32, None)
    assert amx_linear.PROFILER_NAME in {e.key for e in prof.key_averages()}
