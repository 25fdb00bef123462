"""KV cache manager: allocation, prefix hits, eviction order, reset, connector hooks."""

from __future__ import annotations

import pytest

from actorllm.core.kv_cache import BlockHasher, FreeBlockQueue, KVCacheBlock, KVCacheManager
from actorllm.core.request import Request
from actorllm.core.sampling_params import SamplingParams


def req(
    rid: str, tokens: list[int], salt: str | None = None, kv: KVCacheManager | None = None
) -> Request:
    r = Request(rid, tokens, SamplingParams(), cache_salt=salt)
    if kv is not None:
        r.attach_block_hasher(kv.block_hasher)
    return r


def compute(kv: KVCacheManager, r: Request) -> list[int]:
    """Allocate the whole request, mark it computed, free it (its blocks get cached)."""
    blocks, n = kv.get_computed_blocks(r)
    got = kv.allocate_slots(r, r.num_tokens - n, n, blocks)
    assert got is not None
    r.num_computed_tokens = r.num_tokens
    return kv.get_block_ids(r.request_id)


def test_free_queue_is_o1_linked_list() -> None:
    blocks = [KVCacheBlock(i) for i in range(5)]
    q = FreeBlockQueue(blocks)
    q.remove(blocks[2])
    q.appendleft(blocks[2])
    q.append(q.popleft())
    assert [b.block_id for b in q] == [0, 1, 3, 4, 2]
    assert len(q) == 5
    for _ in range(5):
        q.popleft()
    with pytest.raises(IndexError):
        q.popleft()


def test_block_hashes_chain_and_salt() -> None:
    h = BlockHasher(2)
    a: list[bytes] = []
    b: list[bytes] = []
    h.extend(a, [1, 2, 3, 4], None)
    h.extend(b, [9, 9, 3, 4], None)
    assert a[1] != b[1]  # same block tokens, different parent
    c: list[bytes] = []
    h.extend(c, [1, 2, 3, 4], "salt")
    assert c[0] != a[0] and c[1] != a[1]
    assert len(BlockHasher(2, "sha256").hash_block(None, [1, 2])) == 32


def test_allocate_failure_changes_nothing_and_null_block_is_never_handed_out() -> None:
    kv = KVCacheManager(num_blocks=4, block_size=4)
    r = req("a", list(range(20)), kv=kv)
    assert kv.allocate_slots(r, 20) is None  # needs 5, 3 usable
    assert kv.num_free_blocks == 3 and kv.get_block_ids("a") == []
    got = kv.allocate_slots(r, 12)
    assert got is not None and sorted(b.block_id for b in got) == [1, 2, 3]
    assert kv.usage == 1.0


def test_prefix_hit_never_covers_the_last_token_and_counts_stats() -> None:
    kv = KVCacheManager(num_blocks=16, block_size=4)
    a = req("a", list(range(8)), kv=kv)
    compute(kv, a)
    kv.free(a)
    b = req("b", list(range(8)), kv=kv)
    blocks, n = kv.get_computed_blocks(b)
    assert n == 4 and len(blocks) == 1  # 8 tokens: the second block holds the last token
    c = req("c", list(range(9)), kv=kv)
    assert kv.get_computed_blocks(c)[1] == 8
    assert (kv.prefix_cache_queries, kv.prefix_cache_hits) == (8 + 8 + 9, 12)


def test_hits_take_references_and_leave_the_free_queue() -> None:
    kv = KVCacheManager(num_blocks=8, block_size=4)
    a = req("a", list(range(9)), kv=kv)
    ids = compute(kv, a)
    b = req("b", list(range(9)), kv=kv)
    # Not registered while the step computing them is the current one (same-step hits).
    assert kv.get_computed_blocks(b) == ([], 0)
    kv.allocate_slots(a, 1)  # a's next step: the blocks its first step computed register
    blocks, n = kv.get_computed_blocks(b)
    assert [x.block_id for x in blocks] == ids[:2]
    kv.allocate_slots(b, 1, n, blocks)
    assert [x.ref_cnt for x in blocks] == [2, 2]
    kv.free(a)
    assert [x.ref_cnt for x in blocks] == [1, 1]
    assert kv.num_free_blocks == 7 - 3  # b holds 2 shared + 1 own


def test_eviction_order_is_tail_first_and_calls_back() -> None:
    kv = KVCacheManager(num_blocks=5, block_size=2)
    evicted: list[int] = []
    kv.eviction_callbacks.append(lambda h, bid: evicted.append(bid))
    a = req("a", [1, 2, 3, 4, 5, 6, 7], kv=kv)
    ids = compute(kv, a)  # 4 blocks, the first 3 full
    pairs = kv.get_cached_block_pairs(a)
    assert [bid for _, bid in pairs] == ids[:3]
    kv.free(a)
    # The uncached partial block is reused first, then the chain from its tail.
    b = req("b", [9] * 8, kv=kv)
    got = kv.allocate_slots(b, 8)
    assert got is not None
    assert [x.block_id for x in got] == [ids[3], ids[2], ids[1], ids[0]]
    assert evicted == [ids[2], ids[1], ids[0]]
    assert not kv.block_pool.cached


def test_reset_prefix_cache_refused_in_use() -> None:
    kv = KVCacheManager(num_blocks=8, block_size=2)
    a = req("a", [1, 2, 3, 4, 5], kv=kv)
    compute(kv, a)
    kv.allocate_slots(a, 1)  # registers computed blocks
    assert kv.block_pool.cached and kv.reset_prefix_cache() is False
    kv.free(a)
    assert kv.reset_prefix_cache() is True and not kv.block_pool.cached
    assert kv.get_computed_blocks(req("b", [1, 2, 3, 4, 5], kv=kv)) == ([], 0)


def test_caching_disabled_never_hits() -> None:
    kv = KVCacheManager(num_blocks=8, block_size=2, enable_caching=False)
    a = req("a", [1, 2, 3, 4, 5], kv=kv)
    compute(kv, a)
    kv.free(a)
    assert kv.get_computed_blocks(req("b", [1, 2, 3, 4, 5], kv=kv)) == ([], 0)
