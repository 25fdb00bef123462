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

T = gguf.GGMLQuantizationType
# Byte offsets of each type's float16 scales (kept finite in the random blocks).
SCALES = {T.Q8_0: (0,), T.Q4_0: (0,), T.Q4_K: (0, 2), T.Q6_K: (208,)}


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
    assert (got.offsets is None) == (qtype != T.Q4_K)


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


def test_types_without_a_kernel_are_refused_by_name() -> None:
    with pytest.raises(GGUFTypeError, match=r"'blk.0.ffn_down.weight' has type Q5_K"):
        check_type("blk.0.ffn_down.weight", T.Q5_K)
