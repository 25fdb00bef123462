"""The AVX512-VNNI W8A8 kernel (kernels/w8a8_vnni.py) against the definition
(tests/kernels/test_amx_int8_linear.py's, bit for bit): every pass shape (1 to 8 rows, one
or two column tiles, the L2 chunks of a prefill), rows independent of their batch, the
layout's round trip, the module that stores its weight tiled, the AMX tiles' bits where a
host has both, and a build without the path says so."""

from __future__ import annotations

import pytest
import torch

from actorllm.kernels import amx_int8_linear, int8_gemm, w8a8_vnni
from actorllm.models.quant.apply import weight_bytes
from tests.kernels.test_amx_int8_linear import _case, _definition, _module

needs_vnni = pytest.mark.skipif(
    not w8a8_vnni.available(), reason="no AVX512-VNNI on this host (detected)"
)


def _run(
    x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    out = w8a8_vnni.linear(x, w8a8_vnni.tile_layout(w), w_scale, bias)
    assert out is not None
    return out


def test_the_layout_round_trips() -> None:
    w = torch.randint(-128, 128, (48, 192), dtype=torch.int8)
    packed = w8a8_vnni.tile_layout(w)
    assert packed.dtype == torch.uint8 and packed.shape == (48, 192)
    assert torch.equal(w8a8_vnni.untile(packed), w)
    # tile 1, step 2 (inputs 8..11), output row 16 + 3: bytes 4 * 3 .. of its 64
    start = 16 * 192 + 64 * 2 + 4 * 3
    assert packed.flatten()[start : start + 4].tolist() == [(int(v) + 128) for v in w[19, 8:12]]


@needs_vnni
@pytest.mark.parametrize("m", [1, 3, 4, 8, 9, 17, 70])
@pytest.mark.parametrize(("i", "o"), [(64, 16), (192, 48), (1024, 96)])
def test_bits_are_the_definitions(m: int, i: int, o: int) -> None:
    x, w, w_scale, bias = _case(m, i, o, torch.bfloat16, m * 7919 + i + o)
    for b in (None, bias):
        out = _run(x, w, w_scale, b)
        assert out.dtype == torch.bfloat16 and out.shape == (m, o)
        assert torch.equal(out, _definition(x, w, w_scale, b))


@needs_vnni
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_other_input_dtypes(dtype: torch.dtype) -> None:
    x, w, w_scale, bias = _case(19, 256, 64, dtype, 5)
    out = _run(x, w, w_scale, bias)
    assert out.dtype == dtype and torch.equal(out, _definition(x, w, w_scale, bias))


@needs_vnni
def test_a_prefill_in_l2_chunks() -> None:
    """600 rows of 1,024 inputs: the team quantizes them, and the passes go over the weight
    in two chunks of quantized input (512 KB each)."""
    x, w, w_scale, bias = _case(600, 1024, 32, torch.bfloat16, 11)
    assert torch.equal(_run(x, w, w_scale, bias), _definition(x, w, w_scale, bias))


@needs_vnni
def test_a_row_does_not_depend_on_its_batch() -> None:
    """Batches of 1 to 9 rows run passes of 1 to 8 rows and one or two tiles (each its own
    compiled loop): a row's result is the same bits in all of them."""
    x, w, w_scale, bias = _case(9, 512, 48, torch.bfloat16, 3)
    packed = w8a8_vnni.tile_layout(w)
    full = w8a8_vnni.linear(x, packed, w_scale, bias)
    assert full is not None
    for m in range(1, 9):
        part = w8a8_vnni.linear(x[:m].contiguous(), packed, w_scale, bias)
        assert part is not None and torch.equal(part, full[:m])


@needs_vnni
def test_the_module_stores_the_weight_tiled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the tiles do not run W8A8, Int8Linear keeps the weight in the kernel's layout
    only (resident bytes: the int8 weight's, its scales, the bias) and gives the bits the
    row-major paths give."""
    monkeypatch.setattr(amx_int8_linear, "available", lambda: False)
    module = _module(1024, 160, True, 0)
    assert module.tiled and not hasattr(module, "weight")
    assert weight_bytes(module) == 160 * 1024 + 160 * 4 + 160 * 2
    x = torch.randn(2, 5, 1024, generator=torch.Generator().manual_seed(1)).bfloat16()
    with torch.no_grad():
        out = module(x)  # [2, 5, 160]
    rows = x.reshape(10, 1024)
    ref = int8_gemm.int8_linear(rows, module.int8_weight(), module.weight_scale, module.bias)
    assert out.shape == (2, 5, 160) and torch.equal(out.reshape(10, 160), ref)


@pytest.mark.skipif(
    not (w8a8_vnni.available() and amx_int8_linear.available()),
    reason="needs both AMX-INT8 tiles and AVX512-VNNI (detected)",
)
@pytest.mark.parametrize("m", [1, 8, 40])
def test_the_tiles_bits(m: int) -> None:
    x, w, w_scale, bias = _case(m, 384, 64, torch.bfloat16, m)
    tiles = amx_int8_linear.linear(x, w, w_scale, bias)
    assert tiles is not None and torch.equal(_run(x, w, w_scale, bias), tiles)


def test_a_build_without_the_path_is_not_available(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(w8a8_vnni, "_BUILD_FLAGS", ("-DNO_W8A8_VNNI",))
    assert not w8a8_vnni.available()
    x, w, w_scale, _ = _case(1, 128, 16, torch.bfloat16, 0)
    assert w8a8_vnni.linear(x, w8a8_vnni.tile_layout(w), w_scale, None) is None
    assert not _module(128, 16, False, 0).tiled  # the module keeps the row-major weight
