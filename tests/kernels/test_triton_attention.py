"""Unified paged attention (Triton) against the torch reference, at tiny shapes.

Every case runs with split-KV forced off (1) and on (3 splits), so both the direct path and
the partial-and-combine path are held to the reference.
"""

from __future__ import annotations

import pytest
import torch

from actorllm.kernels import attention as ref
from actorllm.kernels import triton as tk
from actorllm.kernels.triton.attention import SPLIT_MIN_SEQ_LEN, choose_num_splits
from tests.kernels.conftest import atol

DevDtype = tuple[torch.device, torch.dtype]
SPLITS = pytest.mark.parametrize("splits", [1, 3], ids=["nosplit", "split3"])


def _batch(
    q_lens: list[int], seq_lens: list[int], hq: int, hk: int, d: int, bs: int, dev: DevDtype
) -> tuple[torch.Tensor, ...]:
    """Random q and caches; each request gets distinct random blocks (never the null block)."""
    device, dtype = dev
    nb = 1 + sum((s + bs - 1) // bs for s in seq_lens) + 3
    max_blocks = max((s + bs - 1) // bs for s in seq_lens) + 1  # a padding column of zeros
    q = torch.randn(sum(q_lens), hq, d)
    k_cache = torch.randn(nb, bs, hk, d)
    v_cache = torch.randn(nb, bs, hk, d)
    free = (torch.randperm(nb - 1) + 1).tolist()
    table = torch.zeros(len(seq_lens), max_blocks, dtype=torch.int32)
    for i, s in enumerate(seq_lens):
        n = (s + bs - 1) // bs
        table[i, :n] = torch.tensor([free.pop() for _ in range(n)])
    qsl = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    tensors = (q, k_cache, v_cache, qsl, lens, table)
    return tuple(
        t.to(device=device, dtype=dtype) if t.is_floating_point() else t.to(device) for t in tensors
    )


def _check(
    batch: tuple[torch.Tensor, ...],
    window: int | None = None,
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
    **hints: int,
) -> None:
    q = batch[0]
    scale = q.shape[-1] ** -0.5
    extra = {} if sinks is None else {"sinks": sinks}
    got = tk.paged_attention(*batch, scale, window, softcap=softcap, **extra, **hints)
    want = ref.paged_attention(*batch, scale, window, softcap=softcap, **extra)
    assert got.shape == q.shape and got.dtype == q.dtype
    torch.testing.assert_close(got, want, atol=atol(q.dtype), rtol=1e-2)


@SPLITS
@pytest.mark.parametrize("bs", [8, 16, 32])
@pytest.mark.parametrize("hq,hk", [(2, 2), (4, 2), (8, 2)], ids=["gqa1", "gqa2", "gqa4"])
def test_decodes_across_block_boundaries(
    dev_dtype: DevDtype, splits: int, bs: int, hq: int, hk: int
) -> None:
    torch.manual_seed(bs + hq)
    seq_lens = [1, bs - 1, bs, bs + 1, 3 * bs + 5]
    batch = _batch([1] * 5, seq_lens, hq, hk, 32, bs, dev_dtype)
    _check(batch, num_splits=splits)


@SPLITS
@pytest.mark.parametrize("d", [32, 64])
@pytest.mark.parametrize("hq,hk", [(2, 2), (4, 2), (4, 1)], ids=["gqa1", "gqa2", "gqa4"])
def test_mixed_prefill_chunks_with_prefix_hits_and_decodes(
    dev_dtype: DevDtype, splits: int, d: int, hq: int, hk: int
) -> None:
    torch.manual_seed(d + hq)
    # A fresh prefill, a chunk after a prefix hit, a decode, a chunk ending mid-block, a decode.
    q_lens = [11, 6, 1, 9, 1]
    seq_lens = [11, 30, 33, 25, 16]
    _check(_batch(q_lens, seq_lens, hq, hk, d, 16, dev_dtype), num_splits=splits)


@SPLITS
@pytest.mark.parametrize("window", [1, 5, 20])
def test_sliding_window(dev_dtype: DevDtype, splits: int, window: int) -> None:
    torch.manual_seed(window)
    batch = _batch([12, 1, 14, 1], [12, 40, 35, 7], 4, 2, 32, 8, dev_dtype)
    _check(batch, window, num_splits=splits)


@SPLITS
def test_softcap_with_window(dev_dtype: DevDtype, splits: int) -> None:
    """Gemma 2: scores capped by softcap * tanh(s / softcap), in prefills and decodes."""
    torch.manual_seed(11)
    batch = _batch([12, 1, 14, 1], [12, 40, 35, 7], 4, 2, 32, 8, dev_dtype)
    _check((batch[0] * 4, *batch[1:]), 5, softcap=3.0, num_splits=splits)


@SPLITS
@pytest.mark.parametrize("window", [None, 5])
def test_sinks(dev_dtype: DevDtype, splits: int, window: int | None) -> None:
    """gpt-oss: a sink logit per head in every softmax denominator, below and far above the
    scores, in prefills and decodes; split-KV counts it once."""
    torch.manual_seed(12)
    batch = _batch([12, 1, 14, 1], [12, 40, 35, 7], 4, 2, 32, 8, dev_dtype)
    sinks = torch.tensor([-2.0, 0.5, 3.0, 30.0], device=batch[0].device)
    _check(batch, window, sinks=sinks, num_splits=splits)


@SPLITS
def test_odd_group_and_padded_head_dim(dev_dtype: DevDtype, splits: int) -> None:
    """G = 3 does not divide the 16-row tile; D = 48 is padded to 64 lanes with masks."""
    torch.manual_seed(7)
    _check(_batch([5, 1, 11], [5, 20, 30], 6, 2, 48, 16, dev_dtype), num_splits=splits)


def test_strided_q_from_fused_qkv(dev_dtype: DevDtype) -> None:
    torch.manual_seed(8)
    q, *rest = _batch([6, 1], [6, 18], 4, 2, 32, 16, dev_dtype)
    qkv = torch.randn(q.shape[0], 8 * 32).to(q)
    qkv[:, : 4 * 32] = q.reshape(q.shape[0], -1)
    _check((qkv[:, : 4 * 32].view(q.shape), *rest))


def test_heuristic_splits_long_decodes_and_matches(dev_dtype: DevDtype) -> None:
    torch.manual_seed(9)
    seq_len = SPLIT_MIN_SEQ_LEN + 40
    batch = _batch([1], [seq_len], 2, 1, 32, 32, dev_dtype)
    assert choose_num_splits(1, 1, True, seq_len) > 1
    _check(batch, max_query_len=1, max_seq_len=seq_len)


def test_choose_num_splits_policy() -> None:
    long = SPLIT_MIN_SEQ_LEN * 4
    assert choose_num_splits(4, 8, True, long, num_sms=132) > 1  # 32 programs: idle GPU
    assert choose_num_splits(4, 8, False, long) == 1  # prefill in the batch
    assert choose_num_splits(4, 8, True, None) == 1  # length unknown: no sync to learn it
    assert choose_num_splits(4, 8, True, SPLIT_MIN_SEQ_LEN - 1) == 1  # short contexts
    assert choose_num_splits(64, 8, True, long, num_sms=132) == 1  # 512 programs fill it
    assert choose_num_splits(1, 1, True, 10**6, num_sms=132) == 16  # capped


def test_rejects_inconsistent_shapes(dev_dtype: DevDtype) -> None:
    q, kc, vc, qsl, lens, table = _batch([2], [4], 4, 2, 32, 16, dev_dtype)
    with pytest.raises(ValueError, match="multiple"):
        tk.paged_attention(q[:, :3], kc, vc, qsl, lens, table, 1.0)
    with pytest.raises(ValueError, match="batch"):
        tk.paged_attention(q, kc, vc, qsl[:1], lens, table, 1.0)


@SPLITS
@pytest.mark.parametrize("kv", [torch.float8_e4m3fn, torch.float8_e5m2], ids=["e4m3", "e5m2"])
def test_an_fp8_cache_matches_the_reference(
    dev_dtype: DevDtype, splits: int, kv: torch.dtype
) -> None:
    """An fp8 cache with scales != 1 (kv_cache_dtype fp8): the Triton write stores what the
    reference stores (scaled, saturated) and attention agrees with the reference's."""
    torch.manual_seed(7)
    q_lens, seq_lens = [6, 1, 9, 1], [30, 33, 25, 16]
    q, kc, vc, qsl, lens, table = _batch(q_lens, seq_lens, 4, 2, 32, 16, dev_dtype)
    k8, v8 = torch.zeros_like(kc, dtype=kv), torch.zeros_like(vc, dtype=kv)
    slots = torch.arange(kc.shape[0] * kc.shape[1], device=kc.device)
    src_k = kc.reshape(-1, 2, 32) * 600  # past the e4m3 range where the scale is missed
    src_v = vc.reshape(-1, 2, 32)
    tk.write_kv_cache(src_k, src_v, k8, v8, slots, 4.0, 0.5)
    from actorllm.kernels.kv_cache import write_kv_cache

    ref_k, ref_v = torch.zeros_like(k8, device="cpu"), torch.zeros_like(v8, device="cpu")
    write_kv_cache(src_k.cpu(), src_v.cpu(), ref_k, ref_v, slots.cpu(), 4.0, 0.5)
    for got_c, want_c in ((k8, ref_k), (v8, ref_v)):  # the same bytes
        assert torch.equal(got_c.cpu().view(torch.uint8), want_c.view(torch.uint8))
    assert k8.float().abs().max() == torch.finfo(kv).max or kv == torch.float8_e5m2  # saturated
    scale = 32**-0.5 / 600
    got = tk.paged_attention(q, k8, v8, qsl, lens, table, scale, num_splits=splits,
                             k_scale=4.0, v_scale=0.5)  # fmt: skip
    want = ref.paged_attention(q, k8, v8, qsl, lens, table, scale, k_scale=4.0, v_scale=0.5)
    torch.testing.assert_close(got, want, atol=atol(q.dtype), rtol=1e-2)
