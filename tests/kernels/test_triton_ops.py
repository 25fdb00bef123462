"""RMSNorm, SiLU-and-mul, rotary and the KV-cache write against their torch references."""

from __future__ import annotations

import pytest
import torch

from actorllm.kernels import activation, kv_cache, layernorm, rotary
from actorllm.kernels import triton as tk
from tests.kernels.conftest import atol

DevDtype = tuple[torch.device, torch.dtype]


def _rand(*shape: int, dev: DevDtype, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape) * scale).to(device=dev[0], dtype=dev[1])


@pytest.mark.parametrize("shape", [(5, 48), (2, 3, 32), (0, 16)])
def test_rms_norm(dev_dtype: DevDtype, shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    x = _rand(*shape, dev=dev_dtype, scale=3.0)
    w = _rand(shape[-1], dev=dev_dtype)
    got = tk.rms_norm(x, w, 1e-6)
    want = layernorm.rms_norm(x, w, 1e-6)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, atol=atol(dev_dtype[1]), rtol=1e-2)


def test_fused_add_rms_norm_is_out_of_place(dev_dtype: DevDtype) -> None:
    torch.manual_seed(1)
    x, res = _rand(6, 40, dev=dev_dtype), _rand(6, 40, dev=dev_dtype, scale=2.0)
    w = _rand(40, dev=dev_dtype)
    x0, res0 = x.clone(), res.clone()
    out, new_res = tk.fused_add_rms_norm(x, res, w, 1e-5)
    want_out, want_res = layernorm.fused_add_rms_norm(x, res, w, 1e-5)
    torch.testing.assert_close(new_res, want_res, atol=atol(dev_dtype[1]), rtol=1e-2)
    torch.testing.assert_close(out, want_out, atol=atol(dev_dtype[1]), rtol=1e-2)
    assert torch.equal(x, x0) and torch.equal(res, res0)


@pytest.mark.parametrize("shape", [(7, 80), (2, 3, 32)])
def test_silu_and_mul(dev_dtype: DevDtype, shape: tuple[int, ...]) -> None:
    torch.manual_seed(2)
    x = _rand(*shape, dev=dev_dtype, scale=2.0)
    got = tk.silu_and_mul(x)
    want = activation.silu_and_mul(x)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, atol=atol(dev_dtype[1]), rtol=1e-2)


def test_silu_and_mul_rejects_odd_width(dev_dtype: DevDtype) -> None:
    with pytest.raises(ValueError, match="even"):
        tk.silu_and_mul(_rand(2, 5, dev=dev_dtype))


@pytest.mark.parametrize(
    "scaling",
    [
        None,
        {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
         "original_max_position_embeddings": 64},
    ],
    ids=["default", "llama3"],
)  # fmt: skip
def test_apply_rotary_on_strided_qkv(dev_dtype: DevDtype, scaling: dict | None) -> None:
    torch.manual_seed(3)
    t, hq, hk, d = 5, 4, 2, 32
    cache = rotary.build_cos_sin_cache(256, rotary.rope_inv_freq(d, 10000.0, scaling))
    cache = cache.to(dev_dtype[0])
    qkv = _rand(t, (hq + 2 * hk) * d, dev=dev_dtype)
    q = qkv[:, : hq * d].view(t, hq, d)  # strided views, as a model splits its qkv
    k = qkv[:, hq * d : (hq + hk) * d].view(t, hk, d)
    positions = torch.tensor([0, 1, 17, 100, 255], device=dev_dtype[0])
    got_q, got_k = tk.apply_rotary(positions, q, k, cache)
    want_q, want_k = rotary.apply_rotary(positions, q, k, cache)
    torch.testing.assert_close(got_q, want_q, atol=atol(dev_dtype[1]), rtol=1e-2)
    torch.testing.assert_close(got_k, want_k, atol=atol(dev_dtype[1]), rtol=1e-2)


@pytest.mark.parametrize("cache_dtype", [None, torch.float16], ids=["same", "fp16-cache"])
def test_write_kv_cache_skips_padding(dev_dtype: DevDtype, cache_dtype: torch.dtype | None) -> None:
    torch.manual_seed(4)
    dev, dtype = dev_dtype
    nb, bs, hk, d = 6, 8, 2, 32
    kv = _rand(5, 2 * hk * d, dev=dev_dtype)
    key = kv[:, : hk * d].view(5, hk, d)
    value = kv[:, hk * d :].view(5, hk, d)
    cdt = cache_dtype or dtype
    k_cache = torch.randn(nb, bs, hk, d).to(dev, cdt)
    v_cache = torch.randn(nb, bs, hk, d).to(dev, cdt)
    slots = torch.tensor([8, -1, 9, 47, -1], device=dev)  # block 1, padding, block 5's last
    want_k, want_v = k_cache.clone(), v_cache.clone()
    kv_cache.write_kv_cache(key, value, want_k, want_v, slots)
    tk.write_kv_cache(key, value, k_cache, v_cache, slots)
    assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v)
