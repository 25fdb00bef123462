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
    return kv.get_block_ids(r.request_id)[0]


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
    assert kv.num_free_blocks == 3 and kv.get_block_ids("a") == ([],)
    got = kv.allocate_slots(r, 12)
    assert got is not None and sorted(b.block_id for b in got[0]) == [1, 2, 3]
    assert kv.usage == 1.0


def test_prefix_hit_never_covers_the_last_token_and_counts_stats() -> None:
    kv = KVCacheManager(num_blocks=16, block_size=4)
    a = req("a", list(range(8)), kv=kv)
    compute(kv, a)
    kv.free(a)
    b = req("b", list(range(8)), kv=kv)
    blocks, n = kv.get_computed_blocks(b)
    assert n == 4 and len(blocks[0]) == 1  # 8 tokens: the second block holds the last token
    c = req("c", list(range(9)), kv=kv)
    assert kv.get_computed_blocks(c)[1] == 8
    assert (kv.prefix_cache_queries, kv.prefix_cache_hits) == (8 + 8 + 9, 12)


def test_hits_take_references_and_leave_the_free_queue() -> None:
    kv = KVCacheManager(num_blocks=8, block_size=4)
    a = req("a", list(range(9)), kv=kv)
    ids = compute(kv, a)
    b = req("b", list(range(9)), kv=kv)
    # Not registered while the step computing them is the current one (same-step hits).
    assert kv.get_computed_blocks(b) == (([],), 0)
    kv.allocate_slots(a, 1)  # a's next step: the blocks its first step computed register
    blocks, n = kv.get_computed_blocks(b)
    assert [x.block_id for x in blocks[0]] == ids[:2]
    kv.allocate_slots(b, 1, n, blocks)
    assert [x.ref_cnt for x in blocks[0]] == [2, 2]
    kv.free(a)
    assert [x.ref_cnt for x in blocks[0]] == [1, 1]
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
    assert [x.block_id for x in got[0]] == [ids[3], ids[2], ids[1], ids[0]]
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
    assert kv.get_computed_blocks(req("b", [1, 2, 3, 4, 5], kv=kv)) == (([],), 0)


def test_caching_disabled_never_hits() -> None:
    kv = KVCacheManager(num_blocks=8, block_size=2, enable_caching=False)
    a = req("a", [1, 2, 3, 4, 5], kv=kv)
    compute(kv, a)
    kv.free(a)
    assert kv.get_computed_blocks(req("b", [1, 2, 3, 4, 5], kv=kv)) == (([],), 0)


# -- sliding window ---------------------------------------------------------------------


def _prefill(kv: KVCacheManager, r: Request) -> None:
    """The whole prompt in one step, then its first sampled token."""
    assert kv.allocate_slots(r, r.num_tokens) is not None
    r.num_computed_tokens = r.num_tokens
    r.append_output_token_ids(7)


def _decode(kv: KVCacheManager, r: Request, n: int) -> None:
    """``n`` one-token steps, each sampling a token."""
    for _ in range(n):
        assert kv.allocate_slots(r, 1) is not None
        r.num_computed_tokens += 1
        r.append_output_token_ids(7)


def test_sliding_window_hands_back_blocks_behind_the_window() -> None:
    """A request far longer than the window holds at most window / block_size + 1 blocks."""
    window, bs = 8, 4
    kv = KVCacheManager(num_blocks=64, block_size=bs, sliding_window=window)
    r = req("r", list(range(1, 7)), kv=kv)
    _prefill(kv, r)
    peak = 0
    for _ in range(60):
        _decode(kv, r, 1)
        peak = max(peak, kv.num_held_blocks("r"))
        assert kv.num_held_blocks("r") <= window // bs + 1
    assert r.num_computed_tokens == 66
    assert peak == window // bs + 1
    (ids,) = kv.get_block_ids("r")
    assert len(ids) == 17  # still position-aligned: slot i covers positions [4i, 4i + 4)
    assert ids[:14] == [0] * 14 and 0 not in ids[14:]  # handed-back slots hold the null block
    assert kv.num_free_blocks == 63 - kv.num_held_blocks("r")
    kv.free(r)
    assert kv.num_free_blocks == 63


def test_full_attention_keeps_every_block() -> None:
    kv = KVCacheManager(num_blocks=64, block_size=4)
    r = req("r", list(range(1, 7)), kv=kv)
    _prefill(kv, r)
    _decode(kv, r, 60)
    assert kv.num_held_blocks("r") == 17


def test_handed_back_blocks_stay_in_the_prefix_cache() -> None:
    """Blocks behind the window are registered before they go back (findable until
    evicted); a later prompt with the same prefix hits it all but takes only the blocks
    its next query's window reads."""
    kv = KVCacheManager(num_blocks=64, block_size=4, sliding_window=4)
    prompt = list(range(1, 21))  # 5 blocks
    a = req("a", prompt, kv=kv)
    _prefill(kv, a)
    _decode(kv, a, 1)  # next query at 20 reads from 17 on: blocks 0-3 are done
    assert kv.get_block_ids("a")[0][:4] == [0, 0, 0, 0]
    b = req("b", [*prompt, 99], kv=kv)
    assert all(kv.block_pool.get_cached_block(h) is not None for h in b.block_hashes[:4])
    hits, n = kv.get_computed_blocks(b)
    # Only the block inside the next query's window (positions 17-19) is taken.
    assert n == 20 and [blk.block_id == 0 for blk in hits[0]] == [True] * 4 + [False]
    assert kv.allocate_slots(b, 1, n, hits) is not None
    assert kv.num_held_blocks("b") == 2
    kv.free(a)
    kv.free(b)
    assert kv.num_free_blocks == 63


def test_sliding_window_frees_room_for_admission() -> None:
    """With a window, two long requests fit a pool that full attention could not hold."""
    from actorllm.core.model_runner_output import ModelRunnerOutput
    from actorllm.core.scheduler import Scheduler, SchedulerConfig

    def run(window: int | None) -> tuple[int, int]:
        cfg = SchedulerConfig(
            max_model_len=64, num_blocks=17, block_size=4, sliding_window=window,
            max_num_batched_tokens=64,
        )  # fmt: skip
        s = Scheduler(cfg)
        params = SamplingParams(max_tokens=40, ignore_eos=True)
        for i in range(2):
            s.add_request(Request(f"r{i}", [5 + i] * 10, params))
        preempted = 0
        for _ in range(200):
            so = s.schedule()
            preempted += len(so.preempted_req_ids)
            ids = list(so.num_scheduled_tokens)
            if not ids and not s.num_waiting:
                break
            ro = ModelRunnerOutput(
                step_id=so.step_id, req_ids=ids, sampled_token_ids=[[9]] * len(ids)
            )
            s.update_from_output(so, ro)
        return preempted, s.kv_cache_manager.num_free_blocks

    preempted_full, _ = run(None)
    preempted_swa, free_swa = run(8)
    assert preempted_full > 0  # 2 x 50 tokens need 26 blocks; the pool has 16
    assert preempted_swa == 0
    assert free_swa == 16


def test_window_hit_survives_eviction_of_the_prefix_head() -> None:
    """Freed head blocks go back first and are evicted first; a later prompt with the same
    prefix still hits, needing only the blocks inside the next query's window."""
    window, bs = 6, 4
    kv = KVCacheManager(num_blocks=9, block_size=bs, sliding_window=window)
    prompt = list(range(1, 25))  # 6 blocks
    a = req("a", prompt, kv=kv)
    _prefill(kv, a)
    _decode(kv, a, 1)  # next query at 24 reads from 19 on: blocks 0-3 are handed back
    kv.free(a)
    filler = req("f", list(range(100, 112)), kv=kv)  # 3 blocks: evicts the 3 oldest
    assert kv.allocate_slots(filler, 12) is not None
    kv.free(filler)
    b = req("b", [*prompt, 7, 99], kv=kv)
    # Block 3 was evicted: a left-to-right lookup would stop after 12 tokens.
    assert kv.block_pool.get_cached_block(b.block_hashes[3]) is None
    hits, n = kv.get_computed_blocks(b)
    # The next query sits at 24 and reads from 19 on: blocks 4 and 5 must be cached.
    assert n == 24
    assert [h.block_id == 0 for h in hits[0]] == [True] * 4 + [False] * 2
    assert kv.allocate_slots(b, 2, n, hits) is not None
    assert kv.num_held_blocks("b") == 3  # blocks 4, 5 and one fresh for positions 24-25
    kv.free(b)
    assert kv.num_free_blocks == 8


# -- hybrid: a full group and a sliding group from one pool -----------------------------


def test_hybrid_sliding_group_hands_back_while_the_full_group_keeps_all() -> None:
    window, bs = 8, 4
    kv = KVCacheManager(num_blocks=64, block_size=bs, group_windows=(None, window))
    r = req("r", list(range(1, 7)), kv=kv)
    _prefill(kv, r)
    for _ in range(40):
        _decode(kv, r, 1)
        assert kv.num_held_blocks("r", 1) <= window // bs + 1
    assert kv.num_held_blocks("r", 0) == len(kv.get_blocks("r", 0)) == 12  # 46 positions
    full, sliding = kv.get_block_ids("r")
    assert len(full) == len(sliding) and 0 not in full and sliding[:9] == [0] * 9
    assert not set(full) & set(sliding)  # a block belongs to one group
    assert kv.num_free_blocks == 63 - kv.num_held_blocks("r")
    kv.free(r)
    assert kv.num_free_blocks == 63


def test_hybrid_prefix_hit_is_what_every_group_can_serve() -> None:
    """The full group needs the whole prefix, the sliding group only its window: a hit
    stops where either cannot serve it."""
    bs = 4
    kv = KVCacheManager(num_blocks=64, block_size=bs, group_windows=(None, 4))
    prompt = list(range(1, 21))  # 5 blocks
    a = req("a", prompt, kv=kv)
    _prefill(kv, a)
    _decode(kv, a, 1)  # registers the prompt's blocks in both groups
    kv.free(a)
    b = req("b", [*prompt, 99], kv=kv)
    hits, n = kv.get_computed_blocks(b)
    assert n == 20 and [len(h) for h in hits] == [5, 5]
    assert [x.block_id == 0 for x in hits[1]] == [True] * 4 + [False]
    # Evict the full group's 3rd block: the full group can serve 2 blocks only, and the
    # sliding group must then serve the window of a query at position 8.
    full_third = kv.block_pool.get_cached_block(b.block_hashes[2], group=0)
    assert full_third is not None
    kv.block_pool.free_queue.remove(full_third)
    kv.block_pool._evict(full_third)
    kv.block_pool.free_queue.appendleft(full_third)
    hits, n = kv.get_computed_blocks(b)
    assert n == 8 and [len(h) for h in hits] == [2, 2]
    got = kv.allocate_slots(b, b.num_tokens - n, n, hits)
    assert got is not None and [len(g) for g in got] == [4, 4]
    kv.free(b)
    assert kv.num_free_blocks == 63


def test_hybrid_allocation_is_all_groups_or_none() -> None:
    kv = KVCacheManager(num_blocks=8, block_size=4, group_windows=(None, 4))
    r = req("r", list(range(16)), kv=kv)
    assert kv.allocate_slots(r, 16) is None  # 4 blocks per group, 7 usable
    assert kv.num_free_blocks == 7 and kv.get_block_ids("r") == ([], [])
    got = kv.allocate_slots(r, 12)
    assert got is not None and [len(g) for g in got] == [3, 3]


def test_hybrid_hit_blocks_are_taken_before_fresh_ones() -> None:
    """A free block one group hits must not be handed to another group as a fresh block:
    here group 1's hit blocks sit in the free queue right behind the two blocks group 0's
    three fresh ones start from."""
    kv = KVCacheManager(num_blocks=13, block_size=4, group_windows=(None, 8))
    a = req("a", list(range(1, 10)), kv=kv)  # 3 blocks per group
    _prefill(kv, a)
    _decode(kv, a, 1)
    kv.free(a)  # its 2 full blocks per group stay cached
    c = req("c", list(range(100, 112)), kv=kv)  # cached blocks queued behind a's
    _prefill(kv, c)
    kv.free(c)
    b = req("b", [*range(1, 10), *range(50, 59)], kv=kv)
    hits, n = kv.get_computed_blocks(b)
    assert n == 8
    got = kv.allocate_slots(b, b.num_tokens - n, n, hits)
    assert got is not None and [len(g) for g in got] == [3, 3]
    held = [blk for g in range(2) for blk in kv.get_blocks("b", g) if blk.block_id]
    assert len({blk.block_id for blk in held}) == len(held) == 10
    assert all(blk.ref_cnt == 1 for blk in held)


def test_a_kv_connector_is_refused_for_a_hybrid_model() -> None:
    from actorllm.core.scheduler import Scheduler, SchedulerConfig
    from actorllm.core.scheduler.kv_connector import KVConnectorBase

    cfg = SchedulerConfig(max_model_len=32, num_blocks=32, block_size=4, kv_group_windows=(None, 8))
    with pytest.raises(ValueError, match="kv_connector"):
        Scheduler(cfg, kv_connector=KVConnectorBase())
