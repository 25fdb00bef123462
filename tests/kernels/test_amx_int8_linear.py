"""The AMX-INT8 W8A8 linear against its definition, bit for bit: rows quantized as
``int8_gemm.quantize_rows``, exact integer products, ``((float)acc * scale_row) *
scale_col`` in float32, cast, bias added after the cast. Every path the kernel has (one or
two input-row tiles, 16- and 32-row passes over a streamed block, grouped blocks for large
inputs, ragged output and input widths, a weight of fewer than 32 rows), rows independent
of their batch, the weight read in place (no copy to go stale). Runs only on a host with
AMX-INT8 and a native build."""

from __future__ import annotations

import pytest
import torch

from actorllm.kernels import amx_int8_linear, int8_gemm
from actorllm.models.quant.apply import weight_bytes
from actorllm.models.quant.scaled import Int8Linear
from actorllm.models.quant.spec import QuantSpec

pytestmark = pytest.mark.skipif(
    not amx_int8_linear.available(), reason="no AMX-INT8 (or no native build) here"
)


def _definition(
    x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    q, scale = int8_gemm.quantize_rows(x)  # [M, I], [M, 1]
    acc = q.long() @ w.long().t()  # [M, O], exact
    out = (acc.to(torch.int32).float() * scale * w_scale.t()).to(x.dtype)
    if bias is not None:
        out += bias
    return out


def _case(m: int, i: int, o: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, i, generator=g) * 3).to(dtype)
    if m > 2:
        x[1] = 0.0  # an all-zero row: scale 0
    x[0, :5] = torch.tensor([1.0, -0.5, 0.25, 127 / 254, -127 / 254])[: min(5, i)]  # ties
    w = torch.randint(-128, 128, (o, i), dtype=torch.int8, generator=g)
    w_scale = torch.rand(o, 1, generator=g) * 0.01
    bias = torch.randn(o, generator=g).to(dtype)
    return x, w, w_scale, bias


@pytest.mark.parametrize("m", [1, 3, 16, 17, 32, 33, 70])
@pytest.mark.parametrize(
    ("i", "o"),
    [
        (96, 40),  # I not a multiple of 64, a ragged last block
        (65, 7),  # fewer than 32 output rows, I % 64 == 1
        (130, 100),
        (1100, 33),  # 32-row passes (a block over 32 KB), the last block overlapping
    ],
)
def test_bits_are_the_definitions(m: int, i: int, o: int) -> None:
    x, w, w_scale, bias = _case(m, i, o, torch.bfloat16, m * 7919 + i + o)
    for b in (None, bias):
        out = amx_int8_linear.linear(x, w, w_scale, b)
        assert out is not None and out.dtype == torch.bfloat16 and out.shape == (m, o)
        assert torch.equal(out, _definition(x, w, w_scale, b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_other_input_dtypes(dtype: torch.dtype) -> None:
    x, w, w_scale, bias = _case(19, 200, 72, dtype, 5)
    out = amx_int8_linear.linear(x, w, w_scale, bias)
    assert out is not None and out.dtype == dtype
    assert torch.equal(out, _definition(x, w, w_scale, bias))


def test_grouped_blocks_for_a_large_input() -> None:
    """Over 1 MiB of quantized input: the weight in L2-sized groups, each passed by every
    32-row tile of the input."""
    x, w, w_scale, bias = _case(1000, 1100, 40, torch.bfloat16, 11)
    out = amx_int8_linear.linear(x, w, w_scale, bias)
    assert out is not None and torch.equal(out, _definition(x, w, w_scale, bias))


def test_a_row_does_not_depend_on_its_batch() -> None:
    x, w, w_scale, bias = _case(70, 1024, 96, torch.bfloat16, 3)
    batch = amx_int8_linear.linear(x, w, w_scale, bias)
    assert batch is not None
    for rows in (slice(5, 6), slice(0, 3), slice(16, 33), slice(40, 70)):
        part = amx_int8_linear.linear(x[rows].clone(), w, w_scale, bias)
        assert part is not None and torch.equal(part, batch[rows])


@pytest.mark.parametrize("m", [1, 4, 9])
def test_same_bits_as_the_hosts_other_paths(monkeypatch: pytest.MonkeyPatch, m: int) -> None:
    """int8_linear routes here on this host; the native VNNI call and torch._int_mm, which
    it replaces, give the same bits."""
    x, w, w_scale, bias = _case(m, 3072, 48, torch.bfloat16, m)
    amx = int8_gemm.int8_linear(x, w, w_scale, bias)
    monkeypatch.setattr(amx_int8_linear, "available", lambda: False)
    for native_rows in (0, 64):  # all rows on torch._int_mm, all on the native call
        monkeypatch.setattr(int8_gemm, "native_max_rows", lambda n=native_rows: n)
        assert torch.equal(int8_gemm.int8_linear(x, w, w_scale, bias), amx)


def _module(i: int, o: int, bias: bool, seed: int) -> Int8Linear:
    spec = QuantSpec(
        method="compressed-tensors", scheme="w8a8_int8", bits=8, group_size=-1, sym=True
    )
    module = Int8Linear(i, o, bias, spec, torch.bfloat16)
    module.init_dummy(torch.Generator().manual_seed(seed))
    if module.bias is not None:
        module.bias.normal_(generator=torch.Generator().manual_seed(seed))
    module.finish_loading()
    return module


def test_the_module_gives_the_bits_it_gave_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """Int8Linear through the kernel, against the paths a host without AMX-INT8 runs."""
    module = _module(1024, 160, True, 0)
    x = torch.randn(2, 5, 1024, generator=torch.Generator().manual_seed(1)).bfloat16()
    with torch.no_grad():
        out = module(x)  # [2, 5, 160]
        monkeypatch.setattr(amx_int8_linear, "available", lambda: False)
        before = module(x)
    assert out.shape == (2, 5, 160) and torch.equal(out, before)


def test_the_weight_is_read_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """No copy of the weight is kept (resident bytes: the int8 weight, its scales, the
    bias), so a rewrite in place, through the parameter or its .data, is what the next
    call multiplies: nothing to invalidate."""
    module = _module(256, 64, True, 2)
    resident = weight_bytes(module)
    assert resident == 64 * 256 + 64 * 4 + 64 * 2
    x = torch.randn(8, 256, generator=torch.Generator().manual_seed(3)).bfloat16()
    with torch.no_grad():
        first = module(x)
        new = torch.randint(-128, 128, (64, 256), dtype=torch.int8)
        module.weight.data.copy_(new)
        module.weight_scale.mul_(2.0)
        second = module(x)
    assert weight_bytes(module) == resident
    assert not torch.equal(first, second)
    assert torch.equal(second, _definition(x, new, module.weight_scale, module.bias))
