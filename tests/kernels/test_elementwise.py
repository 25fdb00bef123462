"""The native element-wise kernels (kernels/csrc/elementwise.c) against the torch references:
RMSNorm (plain, after the residual add, per head on a qkv view, Gemma's 1 + w), rotary and
SiLU-and-mul, float32 and bfloat16, odd sizes, strided views, 1 and 0 rows; and the torch
path where the kernel is off or did not build."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from actorllm.kernels import activation, elementwise, kv_cache, layernorm, native, rotary
from tests.helpers.native_builds import BUILDS, use_build

pytestmark = pytest.mark.skipif(
    elementwise._lib() is None,
    reason="the native kernels did not build here (see actorllm.kernels.native)",
)
DTYPES = [torch.float32, torch.bfloat16]


@pytest.fixture(params=list(BUILDS))
def build(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The kernels as built for this host, without AVX-512 and without AVX2 either
    (narrower vectors; tests/helpers/native_builds.py)."""
    use_build(elementwise, elementwise._lib, str(request.param), monkeypatch)
    return str(request.param)


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    """float32: a few ulp (the kernel sums squares in another order); bfloat16: equal but
    for rare one-ulp ties the float32 differences can tip."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
    else:
        torch.testing.assert_close(got.float(), want.float(), rtol=8e-3, atol=1e-6, equal_nan=True)
        differ = (got != want) & ~(got.isnan() & want.isnan())
        assert differ.sum().item() <= max(1, got.numel() // 1000)


def _randn(*shape: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.usefixtures("build")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,h", [(0, 768), (1, 768), (7, 33), (130, 768), (3, 5000)])
def test_rms_norm_and_fused_add(dtype: torch.dtype, rows: int, h: int) -> None:
    x, r = _randn(rows, h, dtype=dtype), _randn(rows, h, dtype=dtype, seed=1)
    w = _randn(h, dtype=dtype, seed=2)
    _close(elementwise.cpu_rms_norm(x, w, 1e-6), layernorm.rms_norm(x, w, 1e-6))
    got, got_res = elementwise.cpu_fused_add_rms_norm(x, r, w, 1e-5)
    want, want_res = layernorm.fused_add_rms_norm(x, r, w, 1e-5)
    assert torch.equal(got_res, want_res)  # one rounding of x + r, as torch
    _close(got, want)


@pytest.mark.usefixtures("build")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("t", [0, 1, 9])
def test_per_head_norm_on_a_qkv_view(dtype: torch.dtype, t: int) -> None:
    """Qwen3's q/k norm over head_dim: [T, H, D] views of the fused projection, read in
    place (rows and heads strided), and a strided residual."""
    qkv = _randn(t, (6 + 2 + 2) * 64, dtype=dtype)
    q = qkv[:, : 6 * 64].view(t, 6, 64)  # [T, 6, 64], row stride 640
    k = qkv[:, 6 * 64 : 8 * 64].view(t, 2, 64)
    w = _randn(64, dtype=dtype, seed=3)
    for x in (q, k):
        _close(elementwise.cpu_rms_norm(x, w, 1e-6), layernorm.rms_norm(x, w, 1e-6))
    wide = _randn(t, 2 * 96, dtype=dtype, seed=4)
    x, r = wide[:, :96], wide[:, 96:]  # both strided
    w96 = _randn(96, dtype=dtype, seed=5)
    got, got_res = elementwise.cpu_fused_add_rms_norm(x, r, w96, 1e-6)
    want, want_res = layernorm.fused_add_rms_norm(x, r, w96, 1e-6)
    assert torch.equal(got_res, want_res)
    _close(got, want)


@pytest.mark.usefixtures("build")
@pytest.mark.parametrize("dtype", DTYPES)
def test_gemma_offset_rounds_once(dtype: torch.dtype) -> None:
    x, w = _randn(5, 48, dtype=dtype), _randn(48, dtype=dtype, seed=1)
    got = elementwise.rms_norm(x, w, 1e-6, offset=1.0)
    assert got is not None
    want = (F.rms_norm(x.float(), (48,), eps=1e-6) * (1.0 + w.float())).to(dtype)
    _close(got[0], want)


@pytest.mark.usefixtures("build")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("t,hq,hk,d", [(0, 12, 4, 64), (1, 12, 4, 64), (17, 3, 1, 10)])
def test_rotary_matches_bit_for_bit(dtype: torch.dtype, t: int, hq: int, hk: int, d: int) -> None:
    """Same float32 ops in the same order (no FMA): identical, both for q | k adjacent in a
    fused qkv and for separate, strided tensors."""
    cache = rotary.build_cos_sin_cache(100, rotary.rope_inv_freq(d, 10000.0))
    pos = torch.randint(0, 100, (t,), generator=torch.Generator().manual_seed(0))
    qkv = _randn(t, (hq + 2 * hk) * d, dtype=dtype)
    before = qkv.clone()
    q = qkv[:, : hq * d].view(t, hq, d)
    k = qkv[:, hq * d : (hq + hk) * d].view(t, hk, d)
    for qq, kk in ((q, k), (q.clone(), _randn(t, hk, 2 * d, dtype=dtype)[..., :d])):
        got = elementwise.cpu_apply_rotary(pos, qq, kk, cache)
        want = rotary.apply_rotary(pos, qq, kk, cache)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert torch.equal(qkv, before)  # out of place


@pytest.mark.usefixtures("build")
def test_partial_rotary_and_bad_positions() -> None:
    cache = rotary.build_cos_sin_cache(8, rotary.rope_inv_freq(16, 10000.0))
    q, k = _randn(3, 2, 64, dtype=torch.float32), _randn(3, 1, 64, dtype=torch.float32)
    pos = torch.tensor([0, 7, 3])
    got = elementwise.cpu_apply_rotary(pos, q[..., :16], k[..., :16], cache)
    want = rotary.apply_rotary(pos, q[..., :16], k[..., :16], cache)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    with pytest.raises(IndexError):
        elementwise.cpu_apply_rotary(torch.tensor([0, 8, 1]), q, k, cache[:, :64])


@pytest.mark.usefixtures("build")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,inter", [(0, 64), (1, 2048), (5, 1500), (3, 7)])
def test_silu_and_mul(dtype: torch.dtype, n: int, inter: int) -> None:
    x = _randn(n, 2 * inter, dtype=dtype) * 6  # well into both tails of the sigmoid
    _close(elementwise.cpu_silu_and_mul(x), activation.silu_and_mul(x))
    wide = _randn(n, 2 * inter + 5, dtype=dtype)[:, : 2 * inter]  # strided rows
    _close(elementwise.cpu_silu_and_mul(wide), activation.silu_and_mul(wide))
    edge = torch.tensor([[0.0, -100.0, 100.0, float("nan"), 1.0, 1.0, 1.0, 1.0]], dtype=dtype)
    _close(elementwise.cpu_silu_and_mul(edge), activation.silu_and_mul(edge))
    # exp overflows to inf as torch's does: silu(-100) is -0, never a denormal-making tiny
    tails = torch.tensor([[-100.0, -95.0, -89.0, 0.5, 0.5, 0.5]], dtype=dtype)
    assert torch.equal(elementwise.cpu_silu_and_mul(tails), torch.zeros(1, 3, dtype=dtype))


def test_the_torch_path_when_off_or_unbuilt(monkeypatch: pytest.MonkeyPatch) -> None:
    """ACTORLLM_NATIVE_KERNELS=0 or a failed build: every entry is the torch reference,
    bit for bit; so is a dtype the kernels do not take."""
    x, w = _randn(4, 32, dtype=torch.float32), _randn(32, dtype=torch.float32, seed=1)
    cache = rotary.build_cos_sin_cache(8, rotary.rope_inv_freq(8, 10000.0))
    q, k, pos = (
        _randn(4, 2, 8, dtype=torch.float32),
        _randn(4, 1, 8, dtype=torch.float32),
        torch.arange(4),
    )
    for how in ("env", "build"):
        with monkeypatch.context() as m:
            elementwise._lib.cache_clear()
            native.library.cache_clear()
            if how == "env":
                m.setenv("ACTORLLM_NATIVE_KERNELS", "0")
            else:
                m.setattr(native, "_build", lambda *a: False)
                m.setenv("ACTORLLM_CACHE_DIR", "/nonexistent-actorllm-test")
            assert elementwise.rms_norm(x, w, 1e-6) is None
            assert torch.equal(elementwise.cpu_rms_norm(x, w, 1e-6), layernorm.rms_norm(x, w, 1e-6))
            got = elementwise.cpu_fused_add_rms_norm(x, x, w, 1e-6)
            assert torch.equal(got[0], layernorm.fused_add_rms_norm(x, x, w, 1e-6)[0])
            assert torch.equal(elementwise.cpu_apply_rotary(pos, q, k, cache)[0],
                               rotary.apply_rotary(pos, q, k, cache)[0])  # fmt: skip
            assert torch.equal(elementwise.cpu_silu_and_mul(x), activation.silu_and_mul(x))
    elementwise._lib.cache_clear()
    native.library.cache_clear()
    half = x.half()
    assert elementwise.silu_and_mul(half) is None
    assert torch.equal(elementwise.cpu_silu_and_mul(half), activation.silu_and_mul(half))


@pytest.mark.usefixtures("build")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_major", [True, False])
def test_kv_write_is_the_reference_copy(dtype: torch.dtype, head_major: bool) -> None:
    """The native KV write against kernels/kv_cache.write_kv_cache: the same cache bytes,
    for strided key/value views (the rotary output and the fused qkv), padding slots, a
    partial block and both cache layouts; a slot past the cache raises as the reference."""
    hk, d, nb, bs, t = 3, 24, 7, 4, 9
    qkv = _randn(t, (2 + 2 * hk) * d, dtype=dtype).view(t, 2 + 2 * hk, d)
    key, value = qkv[:, 2 : 2 + hk], qkv[:, 2 + hk :]  # [T, Hk, D] views, row stride 8 * D

    def cache() -> torch.Tensor:
        if head_major:
            return torch.zeros(hk, nb, bs, d, dtype=dtype).permute(1, 2, 0, 3)
        return torch.zeros(nb, bs, hk, d, dtype=dtype)

    slots = torch.tensor([5, -1, 6, 7, 8, 27, -1, 12, 0])
    got_k, got_v, want_k, want_v = cache(), cache(), cache(), cache()
    elementwise.cpu_write_kv_cache(key, value, got_k, got_v, slots)
    kv_cache.write_kv_cache(key, value, want_k, want_v, slots)
    assert elementwise.write_kv(key, value, cache(), cache(), slots)  # the kernel took it
    assert torch.equal(got_k, want_k) and torch.equal(got_v, want_v)
    with pytest.raises(IndexError):
        elementwise.cpu_write_kv_cache(key, value, got_k, got_v, torch.full((t,), nb * bs))
    # another dtype for the cache than the keys: the reference casts
    assert not elementwise.write_kv(key.half(), value.half(), got_k, got_v, slots)


@pytest.mark.usefixtures("build")
def test_a_prompts_kv_write_over_the_threads_is_the_reference_copy() -> None:
    """A prompt's keys (T x Hk x D past the kernels' serial threshold) are split over the
    threads: the same cache bytes as the reference, padding slots skipped."""
    hk, d, bs, t = 8, 128, 16, 300
    nb = t // bs + 4
    key = _randn(t, hk, d, dtype=torch.bfloat16)
    value = _randn(t, hk, d, dtype=torch.bfloat16, seed=1)
    slots = torch.randperm(nb * bs, generator=torch.Generator().manual_seed(0))[:t]
    slots[::7] = -1
    got_k, got_v = torch.zeros(2, nb, bs, hk, d, dtype=torch.bfloat16).unbind(0)
    want_k, want_v = got_k.clone(), got_v.clone()
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert elementwise.write_kv(key, value, got_k, got_v, slots)
    finally:
        torch.set_num_threads(threads)
    kv_cache.write_kv_cache(key, value, want_k, want_v, slots)
    assert torch.equal(got_k, want_k) and torch.equal(got_v, want_v)


@pytest.mark.usefixtures("build")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "t,hq,hk,d", [(0, 12, 4, 64), (1, 12, 4, 64), (9, 3, 1, 10), (5, 2, 2, 128)]
)
def test_qk_norm_rotary_is_the_three_calls(
    dtype: torch.dtype, t: int, hq: int, hk: int, d: int
) -> None:
    """Qwen3's fused per-head q / k norm + rotary: the native norm twice then the native
    rotary (bf16: bit for bit, the same roundings; float32: the sum of squares may be added
    in another order), on q | k views of a fused qkv, and close to the torch references."""
    cache = rotary.build_cos_sin_cache(50, rotary.rope_inv_freq(d, 10000.0))
    pos = torch.randint(0, 50, (t,), generator=torch.Generator().manual_seed(0))
    qkv = _randn(t, (hq + 2 * hk) * d, dtype=dtype) * 3
    q = qkv[:, : hq * d].view(t, hq, d)
    k = qkv[:, hq * d : (hq + hk) * d].view(t, hk, d)
    wq, wk = _randn(d, dtype=dtype, seed=1), _randn(d, dtype=dtype, seed=2)
    got = elementwise.qk_norm_rotary(pos, q, k, wq, wk, 1e-6, cache)
    assert got is not None
    qn, kn = elementwise.cpu_rms_norm(q, wq, 1e-6), elementwise.cpu_rms_norm(k, wk, 1e-6)
    three = elementwise.cpu_apply_rotary(pos, qn, kn, cache)
    for g, h in zip(got, three, strict=True):  # bf16: the same roundings, bit for bit
        _close(g, h) if dtype == torch.float32 else torch.testing.assert_close(g, h, rtol=0, atol=0)
    ref_q, ref_k = layernorm.rms_norm(q, wq, 1e-6), layernorm.rms_norm(k, wk, 1e-6)
    want = rotary.apply_rotary(pos, ref_q, ref_k, cache)
    for g, w in zip(got, want, strict=True):
        tol = 1e-5 if dtype == torch.float32 else 2e-2  # bf16: the norm's one-ulp ties
        torch.testing.assert_close(g.float(), w.float(), rtol=tol, atol=tol)
    if t:
        with pytest.raises(IndexError):
            elementwise.cpu_qk_norm_rotary(pos + 50, q, k, wq, wk, 1e-6, cache)


def test_plans_follow_the_shapes() -> None:
    """The entries' per-shape checks are cached: a shape the kernel does not take after one
    it takes (and back) still gets the right answer."""
    w = _randn(32, dtype=torch.float32)
    x = _randn(4, 32, dtype=torch.float32)
    assert elementwise.rms_norm(x, w, 1e-6) is not None
    assert elementwise.rms_norm(x.t().contiguous().t(), w, 1e-6) is None  # columns strided
    assert elementwise.rms_norm(x.half(), w.half(), 1e-6) is None
    got = elementwise.rms_norm(x, w, 1e-6)
    assert got is not None
    _close(got[0], layernorm.rms_norm(x, w, 1e-6))
    gu = _randn(3, 2, 16, dtype=torch.bfloat16)
    _close(elementwise.cpu_silu_and_mul(gu), activation.silu_and_mul(gu))
    gt = gu.transpose(0, 1)  # [2, 3, 16]: reshaping it copies, so the torch path
    _close(elementwise.cpu_silu_and_mul(gt), activation.silu_and_mul(gt))


@pytest.mark.parametrize("dtype", DTYPES)
def test_denormals_and_nan_round_within_tolerance(dtype: torch.dtype) -> None:
    """Where the host has AVX512-BF16 the bf16 kernels round with vcvtneps2bf16: the same
    bits as torch for every normal value, but denormals flush to zero (off by < 1.2e-38)
    and a NaN keeps its payload (torch: 0x7fc0)."""

    def near(got: torch.Tensor, want: torch.Tensor) -> None:
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got.float(), want.float(), rtol=8e-3, atol=2e-38, equal_nan=True)

    x = _randn(4, 64, dtype=torch.float32) * 1e-38  # squares underflow; rows are denormal
    x[0, 3] = float("nan")
    x, w = x.to(dtype), _randn(64, dtype=dtype, seed=1)
    near(elementwise.cpu_rms_norm(x, w * 1e-35, 1e-6), layernorm.rms_norm(x, w * 1e-35, 1e-6))
    cache = rotary.build_cos_sin_cache(8, rotary.rope_inv_freq(64, 10000.0))
    q, k, pos = x.view(4, 1, 64), x.view(4, 1, 64).clone(), torch.arange(4)
    got, want = (
        elementwise.cpu_apply_rotary(pos, q, k, cache),
        rotary.apply_rotary(pos, q, k, cache),
    )
    for g, ww in zip(got, want, strict=True):
        near(g, ww)
    gu = torch.cat([x, x * 1e30], dim=-1)  # silu(tiny) * up: around the denormal boundary
    near(elementwise.cpu_silu_and_mul(gu), activation.silu_and_mul(gu))
