"""W8A8's int8 GEMM: torch._int_mm (hosts with VNNI / AMX-INT8) and the float32 fallback
give the same integers; per-token quantization is vLLM's."""

from __future__ import annotations

import pytest
import torch

from actorllm.kernels import int8_gemm


@pytest.mark.parametrize("path", ["int_mm", "i8_gemm", "float32"])
def test_every_path_gives_the_exact_integer_product(
    monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    monkeypatch.setattr(int8_gemm, "native_int8", lambda: path == "int_mm")
    if path == "float32":
        monkeypatch.setattr(int8_gemm, "i8_gemm", lambda q, w: None)
    g = torch.Generator().manual_seed(0)
    for m in (1, 7, 33):
        q = torch.randint(-128, 128, (m, 96), dtype=torch.int8, generator=g)
        w = torch.randint(-128, 128, (40, 96), dtype=torch.int8, generator=g)
        out = int8_gemm.int8_matmul(q, w)
        assert torch.equal(out.to(torch.int64), q.long() @ w.long().t())


def test_per_token_quantization_rounds_half_to_even_and_keeps_zero_rows() -> None:
    x = torch.tensor([[1.0, -0.5, 0.25, 127 / 254], [0.0, 0.0, 0.0, 0.0]])
    q, scale = int8_gemm.quantize_rows(x)
    assert scale[0, 0] == pytest.approx(1 / 127) and scale[1, 0] == 0
    assert q[0].tolist() == [127, -64, 32, 64] and q[1].tolist() == [0, 0, 0, 0]


def test_int8_linear_scales_back() -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 64, generator=g)
    w = torch.randint(-127, 128, (16, 64), dtype=torch.int8, generator=g)
    w_scale = torch.rand(16, 1, generator=g) * 0.01
    bias = torch.randn(16, generator=g)
    out = int8_gemm.int8_linear(x, w, w_scale, bias)
    ref = x @ (w.float() * w_scale).t() + bias
    assert (out - ref).abs().max() < 0.02 * ref.abs().max()


@pytest.mark.parametrize("m", [1, 7, 33])
def test_the_native_linear_is_the_torch_path_bit_for_bit(m: int) -> None:
    """On hosts without int8 dot products one native call runs the whole W8A8 linear, at
    every row count (prefill too): the same rounding, integers and epilogue as the torch
    path, and a row gets the same bits alone as in its batch."""
    from actorllm.kernels.quant_gemm import w8a8_linear

    g = torch.Generator().manual_seed(m)
    x = torch.randn(m, 3072, generator=g).bfloat16()
    x[-1] = 0.0  # an all-zero row: scale 0
    x[0, :5] = torch.tensor([1.0, -0.5, 0.25, 127 / 254, -127 / 254])  # ties
    w = torch.randint(-128, 128, (40, 3072), dtype=torch.int8, generator=g)
    w_scale = torch.rand(40, 1, generator=g) * 0.01
    out = _native_is_exact(x, w, w_scale)
    alone = w8a8_linear(x[:1].clone(), w, w_scale)
    assert alone is not None and torch.equal(alone, out[:1])


def test_the_native_row_quantization_is_torchs_in_lanes_and_tail() -> None:
    """float32 inputs (every division rounds) of a width that leaves a tail past the
    16-wide lanes, one row per magnitude: the native call's int8 values and scales are
    torch's, so its products are too."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4, 1000, generator=g) * torch.tensor([[1e-3], [1.0], [7.0], [3e4]])
    x[2, -3] = 50.0  # the row's largest value in the tail
    w = torch.randint(-128, 128, (16, 1000), dtype=torch.int8, generator=g)
    _native_is_exact(x, w, torch.rand(16, 1, generator=g) * 0.01)


def _native_is_exact(x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    """The native W8A8 call on ``x`` (skips where there is no native build), asserted
    equal to the torch path's rounding, exact integers and epilogue; its output."""
    from actorllm.kernels.quant_gemm import w8a8_linear

    out = w8a8_linear(x, w, w_scale)
    if out is None:
        pytest.skip("no native build here")
    q, scale = int8_gemm.quantize_rows(x)
    exact = (q.long() @ w.long().t()).float() * scale * w_scale.t()  # [M, O]
    assert torch.equal(out, exact)
    return out


def test_few_rows_take_the_native_call_where_int_mm_serves_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With int8 dot products but no AMX, batch-1 decode rows still take the native call
    (faster there), more rows torch._int_mm; a row gets the same bits on either."""
    from actorllm.kernels import amx_int8_linear, quant_gemm

    if quant_gemm.w8a8_linear(torch.zeros(1, 8), torch.zeros(4, 8, dtype=torch.int8),
                              torch.ones(4, 1)) is None:  # fmt: skip
        pytest.skip("no native build here")
    monkeypatch.setattr(int8_gemm, "native_int8", lambda: True)
    monkeypatch.setattr(amx_int8_linear, "available", lambda: False)  # a VNNI host
    native_rows: list[int] = []
    real = int8_gemm.w8a8_linear

    def spy(x: torch.Tensor, *args: torch.Tensor) -> torch.Tensor | None:
        native_rows.append(x.shape[0])
        return real(x, *args)

    monkeypatch.setattr(int8_gemm, "w8a8_linear", spy)
    g = torch.Generator().manual_seed(3)
    n = int8_gemm.native_max_rows()
    x = torch.randn(n + 1, 256, generator=g)
    w = torch.randint(-128, 128, (48, 256), dtype=torch.int8, generator=g)
    w_scale = torch.rand(48, 1, generator=g) * 0.01
    few = int8_gemm.int8_linear(x[:n], w, w_scale, None)
    more = int8_gemm.int8_linear(x, w, w_scale, None)
    assert native_rows == [n]
    assert torch.equal(few, more[:n])
