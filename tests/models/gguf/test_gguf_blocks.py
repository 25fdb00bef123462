"""GGUF blocks repacked into the kernels' layout hold exactly what ``gguf.quants``
dequantizes, and the native kernel multiplies them as the dequantized float32 weight."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

from actorllm.kernels import quant_gemm
from actorllm.models.gguf import blocks
from actorllm.models.gguf.blocks import GGUFTypeError, check_type, repack
from actorllm.models.gguf.linear import GGUFLinear

T = gguf.GGMLQuantizationType
# Byte offsets of each type's float16 scales (kept finite in the random blocks).
SCALES = {
    T.Q8_0: (0,), T.Q4_0: (0,), T.Q4_1: (0, 2), T.Q5_0: (0,), T.Q5_1: (0, 2),
    T.Q2_K: (80, 82), T.Q3_K: (108,), T.Q4_K: (0, 2), T.Q5_K: (0, 2), T.Q6_K: (208,),
}  # fmt: skip
# The types whose layout keeps an offset a group (the others are symmetric codes).
WITH_OFFSETS = (T.Q4_1, T.Q5_1, T.Q2_K, T.Q4_K, T.Q5_K)
# Types gguf.quants can quantize (the others are random blocks built by hand).
QUANTIZABLE = (T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1)


def _blocks(qtype: T, rows: int, cols: int) -> np.ndarray:
    rng = np.random.default_rng(int(qtype))
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (rows, cols // block, size), dtype=np.uint8)
    for at in SCALES[qtype]:
        d = rng.uniform(0.001, 0.1, (rows, cols // block)).astype(np.float16)
        raw[..., at : at + 2] = d.view(np.uint8).reshape(rows, cols // block, 2)
    return raw.reshape(rows, -1)


@pytest.mark.parametrize("native", [True, False], ids=["native", "torch"])
@pytest.mark.parametrize("qtype", list(SCALES), ids=lambda t: t.name)
def test_repacked_blocks_dequantize_exactly_as_gguf(
    qtype: T, native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not native:
        monkeypatch.setattr(blocks, "wq_dequant", lambda *a: None)
    raw = _blocks(qtype, 3, 512)
    ref = torch.from_numpy(gguf.quants.dequantize(raw, qtype))
    got = repack(raw, qtype, 3, 512)
    assert torch.equal(got.dequantize(0, 3), ref)
    # The symmetric types hold a scale per group and nothing else.
    assert (got.offsets is None) == (qtype not in WITH_OFFSETS)
    assert (got.bits, got.group_size) == blocks.LAYOUT[qtype]


@pytest.mark.parametrize("qtype", QUANTIZABLE, ids=lambda t: t.name)
def test_blocks_gguf_quantizes_repack_exactly(qtype: T) -> None:
    """What ``gguf.quants.quantize`` writes (codes at both ends of their range) reads back
    as ``gguf.quants.dequantize`` reads it."""
    w = np.random.default_rng(1).standard_normal((4, 256)).astype(np.float32)
    raw = gguf.quants.quantize(w, qtype)
    ref = torch.from_numpy(gguf.quants.dequantize(raw, qtype))
    assert torch.equal(repack(raw, qtype, 4, 256).dequantize(0, 4), ref)


@pytest.mark.skipif(quant_gemm._fn() is None, reason="no native build here")
@pytest.mark.parametrize("qtype", list(SCALES), ids=lambda t: t.name)
def test_the_native_kernel_multiplies_the_dequantized_weight(qtype: T) -> None:
    raw = _blocks(qtype, 40, 512)
    w = torch.from_numpy(gguf.quants.dequantize(raw, qtype))  # [40, 512]
    bw = repack(raw, qtype, 40, 512)
    x = torch.randn(3, 512, generator=torch.Generator().manual_seed(0))
    out = quant_gemm.wq_linear(x, bw.packed, bw.bits, bw.scales, bw.offsets, bw.group_size, None)
    assert out is not None
    torch.testing.assert_close(out, x @ w.t(), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("rows", [3, 40], ids=["decode", "prefill"])
@pytest.mark.parametrize("qtype", list(SCALES), ids=lambda t: t.name)
def test_the_gguf_linear_equals_the_float_linear(
    qtype: T, rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``GGUFLinear``'s forward (float inputs) over the repacked blocks is the float linear
    over the dequantized weight, at decode (native kernel) and prefill (tiles) row counts."""
    monkeypatch.setenv("ACTORLLM_CPU_INT4_W4A8", "0")
    monkeypatch.setenv("ACTORLLM_CPU_GGUF_A8", "0")
    raw = _blocks(qtype, 48, 512)
    w = torch.from_numpy(gguf.quants.dequantize(raw, qtype))  # [48, 512]
    layer = GGUFLinear(512, 48, "t")
    layer.set_weights([repack(raw, qtype, 48, 512)], None)
    x = torch.randn(rows, 512, generator=torch.Generator().manual_seed(0))
    # float32 sums in another order: within a few ulps of the sum of |products|.
    bound = 1e-5 * (x.abs() @ w.abs().t())  # [rows, 48]
    assert ((layer(x) - x @ w.t()).abs() <= bound).all()


def test_types_without_a_kernel_are_refused_by_name() -> None:
    for qtype in (T.Q8_1, T.Q8_K, T.IQ4_XS, T.TQ1_0, T.MXFP4):
        with pytest.raises(GGUFTypeError, match=rf"'blk.0.ffn_down.weight' has type {qtype.name}"):
            check_type("blk.0.ffn_down.weight", qtype)


@pytest.mark.parametrize("qtype", [T.Q2_K, T.Q3_K], ids=lambda t: t.name)
def test_groups_of_16_in_4_bits_keep_float_inputs(
    qtype: T, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The W4A8 kernel takes groups of 32 and more: Q2_K / Q3_K's 4-bit groups of 16 run
    on float inputs even with int8 inputs switched on (the float linear's numbers, not
    W4A8's rounding), at decode and prefill row counts."""
    monkeypatch.setenv("ACTORLLM_CPU_INT4_W4A8", "1")
    raw = _blocks(qtype, 48, 512)
    w = torch.from_numpy(gguf.quants.dequantize(raw, qtype))  # [48, 512]
    layer = GGUFLinear(512, 48, "t")
    layer.set_weights([repack(raw, qtype, 48, 512)], None)
    for rows in (1, 40):
        x = torch.randn(rows, 512, generator=torch.Generator().manual_seed(rows))
        bound = 1e-5 * (x.abs() @ w.abs().t())  # [rows, 48]
        assert ((layer(x) - x @ w.t()).abs() <= bound).all()
