"""The grammar token bitmask: the torch reference, and the Triton kernel against it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from actorllm.kernels import token_bitmask as ref

DevDtype = tuple[torch.device, torch.dtype]


def _pack(allowed: torch.Tensor) -> torch.Tensor:
    """[R, V] bool -> [R, ceil(V/32)] int32, bit t%32 of word t//32 (the grammar layout)."""
    r, v = allowed.shape
    w = (v + 31) // 32
    bits = np.zeros((r, w * 32), dtype=np.uint8)
    bits[:, :v] = allowed.numpy()
    packed = np.packbits(bits, axis=1, bitorder="little").view(np.int32)
    return torch.from_numpy(packed.copy())


def test_unpack_round_trips_and_pads_past_the_words() -> None:
    torch.manual_seed(0)
    allowed = torch.rand(3, 70) < 0.5
    mask = _pack(allowed)
    assert mask.shape == (3, 3)
    assert torch.equal(ref.unpack_bitmask(mask, 70), allowed)
    wide = ref.unpack_bitmask(mask, 100)  # logits wider than the tokenizer's vocab
    assert not wide[:, 96:].any()


def test_reference_masks_only_constrained_rows_and_adds_the_adjust() -> None:
    torch.manual_seed(1)
    logits = torch.randn(4, 40)
    adjust = torch.randn(4, 40)
    allowed = torch.rand(2, 40) < 0.3
    rows = torch.tensor([1, -1, 0, -1])
    want = logits + adjust
    want[0][~allowed[1]] = float("-inf")
    want[2][~allowed[0]] = float("-inf")
    got = ref.apply_token_bitmask(logits.clone(), _pack(allowed), rows, adjust)
    assert torch.equal(got, want)


def test_reference_in_place_without_adjust() -> None:
    logits = torch.zeros(1, 33)
    mask = torch.zeros(1, 2, dtype=torch.int32)
    mask[0, 1] = 1  # only token 32
    out = ref.apply_token_bitmask(logits, mask, torch.tensor([0]))
    assert out is logits
    assert torch.isfinite(logits[0]).nonzero().flatten().tolist() == [32]


@pytest.mark.parametrize("with_adjust", [False, True])
def test_triton_matches_reference(dev_dtype: DevDtype, with_adjust: bool) -> None:
    from actorllm.kernels import triton as tk

    dev = dev_dtype[0]
    torch.manual_seed(2)
    n, v = 5, 100  # several 32-token words, a partial last tile, a partial last word
    logits = torch.randn(n, v)
    adjust = torch.randn(n, v) if with_adjust else None
    allowed = torch.rand(3, v) < 0.4
    allowed[2] = False
    allowed[2, v - 1] = True  # only the very last token
    rows = torch.tensor([2, -1, 0, 1, -1])
    mask = _pack(allowed)
    want = ref.apply_token_bitmask(logits.clone(), mask, rows, adjust)
    got = tk.apply_token_bitmask(
        logits.clone().to(dev), mask.to(dev), rows.to(dev),
        None if adjust is None else adjust.to(dev), block_v=64,
    )  # fmt: skip
    assert torch.equal(got.cpu(), want)


def test_triton_rejects_bad_shapes(dev_dtype: DevDtype) -> None:
    from actorllm.kernels import triton as tk

    dev = dev_dtype[0]
    logits = torch.zeros(2, 40, device=dev)
    mask = torch.zeros(1, 2, dtype=torch.int32, device=dev)
    with pytest.raises(ValueError, match="rows"):
        tk.apply_token_bitmask(logits, mask, torch.zeros(3, dtype=torch.int64, device=dev))
    with pytest.raises(ValueError, match="int32"):
        tk.apply_token_bitmask(logits, mask.long(), torch.zeros(2, dtype=torch.int64, device=dev))


def _want(logits: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """The unpack-and-fill reference, written out."""
    want = logits.clone()
    allowed = ref.unpack_bitmask(mask, logits.shape[1])
    for i, r in enumerate(rows.tolist()):
        if r >= 0:
            want[i][~allowed[r]] = float("-inf")
    return want


@pytest.mark.parametrize("vocab", [40, 64, 1000])
@pytest.mark.parametrize("path", ["native", "xgrammar"])
def test_the_cpu_kernels_match_the_torch_path(
    vocab: int, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CPU float32 logits go through csrc/token_bitmask.c (or, without a build, xgrammar's
    packed-word kernel); the result equals the unpack-and-fill reference, rows mapped
    through ``rows`` and unconstrained rows kept. Words all ones, all zeros and mixed."""
    if path == "native" and ref._native_apply(torch.float32) is None:
        pytest.skip("no working C compiler here")
    if path == "xgrammar":
        monkeypatch.setattr(ref, "_native_apply", lambda dtype: None)
        assert ref._xgrammar_cpu_apply() is not None
    torch.manual_seed(vocab)
    logits = torch.randn(5, vocab)
    adjust = torch.randn(5, vocab)
    allowed = torch.rand(3, vocab) < 0.4
    allowed[1] = True
    allowed[1, 33] = False  # one forbidden token in a row of allowed words
    allowed[2, :32] = False  # an all-zero word
    allowed[2, 32:] = True
    mask = _pack(allowed)
    rows = torch.tensor([2, -1, 0, 1, -1])
    want = _want(logits + adjust, mask, rows)
    if path == "xgrammar":
        assert ref._fits_xgrammar(logits, mask)
    got = ref.apply_token_bitmask(logits.clone(), mask, rows, adjust)
    assert torch.equal(got, want)


def test_the_native_kernel_forbids_tokens_past_the_words_and_reads_strided_rows() -> None:
    """Logits wider than 32 * W: the tail is forbidden (xgrammar's kernel would leave it
    open, so that case never went to it). Rows of a wider buffer are read by stride."""
    if ref._native_apply(torch.float32) is None:
        pytest.skip("no working C compiler here")
    base = torch.randn(3, 80)
    logits = base[:, :70]  # [3, 70], rows 80 apart
    mask = torch.full((2, 2), -1, dtype=torch.int32)  # tokens 0..63 allowed
    mask[1, 0] = 0b1010
    rows = torch.tensor([0, -1, 1])
    assert ref._fits_native(logits, mask, rows) and not ref._fits_xgrammar(logits, mask)
    want = _want(logits, mask, rows)
    out = ref.apply_token_bitmask(logits, mask, rows)
    assert torch.equal(out, want) and out.data_ptr() == base.data_ptr()
    assert torch.isfinite(base[0]).nonzero().flatten().tolist() == [*range(64), *range(70, 80)]


def test_the_native_kernel_refuses_a_row_past_the_bitmask() -> None:
    if ref._native_apply(torch.float32) is None:
        pytest.skip("no working C compiler here")
    logits = torch.zeros(1, 40)
    with pytest.raises(ValueError, match="row past"):
        ref.apply_token_bitmask(logits, torch.zeros(1, 2, dtype=torch.int32), torch.tensor([1]))
    assert torch.equal(logits, torch.zeros(1, 40))  # nothing written


def test_a_bitmask_narrower_than_the_logits_stays_off_xgrammar(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tokens past 32 * W are forbidden here; xgrammar would leave them open."""
    monkeypatch.setattr(ref, "_native_apply", lambda dtype: None)
    logits = torch.zeros(1, 70)
    mask = torch.full((1, 2), -1, dtype=torch.int32)  # tokens 0..63 allowed
    assert not ref._fits_xgrammar(logits, mask)
    out = ref.apply_token_bitmask(logits, mask, torch.tensor([0]))
    assert torch.isfinite(out[0]).nonzero().flatten().tolist() == list(range(64))


@pytest.mark.parametrize("vocab", [40, 64, 1000])
def test_the_native_kernel_masks_bfloat16_logits_in_place(vocab: int) -> None:
    """bf16 logits are masked as they are (no float32 copy): the result equals the float32
    path's, rounded to bf16, with forbidden tokens -inf and the tail past the words too."""
    if ref._native_apply(torch.bfloat16) is None:
        pytest.skip("no working C compiler here")
    torch.manual_seed(vocab)
    logits = torch.randn(4, vocab).to(torch.bfloat16)
    allowed = torch.rand(3, vocab) < 0.4
    allowed[1] = True
    allowed[1, vocab - 1] = False
    allowed[2, :32] = False
    mask = _pack(allowed)
    rows = torch.tensor([2, -1, 0, 1])
    assert ref.masks_in_place(logits)
    want = _want(logits.float(), mask, rows).to(torch.bfloat16)
    got = ref.apply_token_bitmask(logits, mask, rows)
    assert got.data_ptr() == logits.data_ptr() and got.dtype == torch.bfloat16
    assert torch.equal(got, want)
    wide = torch.randn(2, vocab + 40).to(torch.bfloat16)  # past 32 * W: forbidden
    got = ref.apply_token_bitmask(wide.clone(), mask, torch.tensor([1, -1]))
    assert torch.isinf(got[0, 32 * mask.shape[1] :]).all() and not torch.isinf(got[1]).any()
