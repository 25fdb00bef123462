"""The reference KV cache write on every storage layout the worker allocates: the CPU's
head- and block-major views are not contiguous (the dtypes the native write does not take,
such as float16, land here)."""

import pytest
import torch

from actorllm.kernels.kv_cache import write_kv_cache


@pytest.mark.parametrize("layout", ["contiguous", "head_major", "block_major"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_write_on_every_layout(layout: str, dtype: torch.dtype) -> None:
    nb, bs, hk, d = 4, 8, 2, 16

    def cache() -> torch.Tensor:  # [NB, BS, Hk, D], as worker/kv_cache.py allocates it
        if layout == "head_major":
            return torch.zeros(hk, nb, bs, d, dtype=dtype).permute(1, 2, 0, 3)
        if layout == "block_major":
            return torch.zeros(nb, hk, bs, d, dtype=dtype).permute(0, 2, 1, 3)
        return torch.zeros(nb, bs, hk, d, dtype=dtype)

    key, value = torch.randn(5, hk, d), torch.randn(5, hk, d)
    slots = torch.tensor([9, 10, -1, 31, 16])  # -1: padding, skipped
    k, v = cache(), cache()
    write_kv_cache(key, value, k, v, slots)
    for t, s in enumerate(slots.tolist()):
        if s >= 0:
            assert torch.equal(k[s // bs, s % bs], key[t].to(dtype))
            assert torch.equal(v[s // bs, s % bs], value[t].to(dtype))
    assert int((k != 0).any(-1).any(-1).sum()) == 4  # nothing else written
