"""The torch reference kernels' fast forms against the textbook formulas they replace
(HF's arithmetic, bit for bit where the dtype allows)."""

from __future__ import annotations

import pytest
import torch

from actorllm.kernels.activation import silu_and_mul
from actorllm.kernels.layernorm import rms_norm
from actorllm.kernels.rotary import apply_rotary, build_cos_sin_cache, rope_inv_freq


def _hf_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * xf.to(x.dtype)


def _hf_rotary(pos: torch.Tensor, x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
    half = cache.shape[-1] // 2
    cos, sin = cache[pos, :half].unsqueeze(1), cache[pos, half:].unsqueeze(1)
    x1, x2 = x.float()[..., :half], x.float()[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_matches_hf(dtype: torch.dtype) -> None:
    x = torch.randn(7, 96).to(dtype) * 3
    w = torch.randn(96).to(dtype)
    torch.testing.assert_close(rms_norm(x, w, 1e-6), _hf_rms_norm(x, w, 1e-6), atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_fused_qk_pass_is_bit_identical(dtype: torch.dtype) -> None:
    hq, hk, d, t = 4, 2, 16, 9
    cache = build_cos_sin_cache(64, rope_inv_freq(d, 10000.0))
    pos = torch.randint(0, 64, (t,))
    qkv = torch.randn(t, (hq + 2 * hk) * d).to(dtype)
    q, k, _ = qkv.split([hq * d, hk * d, hk * d], dim=-1)
    q, k = q.view(t, hq, d), k.view(t, hk, d)
    before = qkv.clone()
    rq, rk = apply_rotary(pos, q, k, cache)  # adjacent in qkv: one pass over both
    sq, sk = apply_rotary(pos, q.clone(), k.clone(), cache)  # separate tensors
    for got in (rq, sq):
        torch.testing.assert_close(got, _hf_rotary(pos, q, cache), atol=0, rtol=0)
    for got in (rk, sk):
        torch.testing.assert_close(got, _hf_rotary(pos, k, cache), atol=0, rtol=0)
    assert torch.equal(qkv, before)  # out of place: the projection output is untouched


def test_silu_and_mul_matches_formula() -> None:
    x = torch.randn(5, 12)
    want = torch.nn.functional.silu(x[:, :6]) * x[:, 6:]
    torch.testing.assert_close(silu_and_mul(x), want, atol=0, rtol=0)


@pytest.mark.parametrize("vocab", [37, 256, 1000, 32000])
def test_inverse_cdf_two_levels_matches_one_scan(vocab: int) -> None:
    """The blocked inverse CDF picks what one full-row cumsum picks, never a zero token."""
    from actorllm.kernels.sampling import sample_inverse_cdf

    g = torch.Generator().manual_seed(vocab)
    probs = (torch.randn(64, vocab, generator=g) * 3).softmax(-1)
    probs[:, ::3] = 0.0  # masked tokens
    u = torch.rand(64, generator=g)
    u[0], u[1] = 0.0, 1.0 - 2.0**-24
    cdf = probs.cumsum(-1)
    total = cdf[:, -1:]
    target = torch.minimum(u.unsqueeze(1) * total, total * (1.0 - 2.0**-20))
    want = torch.searchsorted(cdf, target, right=True).squeeze(1)
    got = sample_inverse_cdf(probs, u)
    assert (got % 3 != 0).all()
    assert (got == want).float().mean() > 0.95  # block sums round differently, rarely
