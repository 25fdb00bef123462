"""The data-parallel routing policy (engine/scheduling/routing.py): prefix affinity
balanced with load."""

from __future__ import annotations

import pytest

from actorllm.engine.scheduling.routing import MIN_GAP, ReplicaRouter


def test_idle_replicas_take_turns() -> None:
    r = ReplicaRouter(3, block_size=4)
    picks = [r.route([i] * 3, [0, 0, 0]).replica for i in range(6)]  # shorter than a block
    assert picks == [0, 1, 2, 0, 1, 2]


def test_least_loaded_wins_without_affinity() -> None:
    r = ReplicaRouter(3, block_size=4)
    assert r.route([1, 2, 3, 4], [5, 1, 3]) == (1, False)


def test_shared_prefix_lands_on_one_replica() -> None:
    r = ReplicaRouter(2, block_size=4)
    system = [7, 7, 7, 7, 8, 8, 8, 8]
    first = r.route([*system, 1, 2], [0, 0]).replica
    loads = [0, 0]
    for tail in range(5):
        loads[first] += 1  # each one still open
        decision = r.route([*system, 100 + tail], loads)
        assert decision == (first, True)


def test_cache_salt_keys_the_affinity_like_the_prefix_cache() -> None:
    """Salted requests share a replica's prefix only under the same salt: the router's keys
    are the prefix cache's block hashes, salt included."""
    from actorllm.core.kv_cache.block_hash import BlockHash, BlockHasher

    r = ReplicaRouter(2, block_size=4)
    system = [7, 7, 7, 7, 8, 8, 8, 8]
    expected: list[BlockHash] = []
    BlockHasher(4, "xxh3_128").extend(expected, system, "tenant-a")
    assert r.prefix_keys(system, "tenant-a") == expected
    assert r.prefix_keys(system, "tenant-a") != r.prefix_keys(system, "tenant-b")
    assert r.prefix_keys(system) != r.prefix_keys(system, "tenant-a")
    a = r.route([*system, 1], [0, 0], "tenant-a")
    assert a == (0, False)
    # Same prompt, another salt (or none): no affinity to tenant a's replica.
    assert r.route([*system, 2], [1, 0], "tenant-b") == (1, False)
    assert r.route([*system, 3], [1, 1]) == (0, False)  # round robin, not affinity
    # The same salt again follows its own prefix, even onto the busier replica.
    assert r.route([*system, 4], [2, 1], "tenant-a") == (0, True)


def test_longest_prefix_wins() -> None:
    r = ReplicaRouter(2, block_size=2)
    assert r.route([1, 1], [0, 0]).replica == 0
    assert r.route([2, 2], [0, 0]).replica == 1
    # [1, 1, 5, 5] -> 0, then a longer match [1, 1, 5, 5, 6, 6] sent to 1 for load:
    assert r.route([1, 1, 5, 5, 6, 6], [100, 0]) == (1, False)
    # Its first block [1, 1] is now remembered on 1 too (the latest route wins); a request
    # sharing all three blocks follows the longest match.
    assert r.route([1, 1, 5, 5, 6, 6, 9], [3, 3]) == (1, True)


@pytest.mark.parametrize(
    ("loads", "kept"),
    [
        ([MIN_GAP, 0], True),  # MIN_GAP more: still kept
        ([MIN_GAP + 1, 0], False),  # more than MIN_GAP over an idle replica: moved
        ([40, 20], True),  # twice as loaded, 20 more: kept (not more than twice)
        ([41, 20], False),  # more than twice and more than MIN_GAP: moved
    ],
)
def test_much_busier_target_loses(loads: list[int], kept: bool) -> None:
    r = ReplicaRouter(2, block_size=2)
    assert r.route([4, 4], [0, 1]).replica == 0
    decision = r.route([4, 4, 9], loads)
    assert decision == ((0, True) if kept else (1, False))
    stats = r.statistics()
    assert (stats.affinity_hits, stats.affinity_overridden) == ((1, 0) if kept else (0, 1))


def test_dead_replica_gets_nothing() -> None:
    r = ReplicaRouter(2, block_size=2)
    assert r.route([3, 3], [0, 0]).replica == 0
    assert r.replica_down(0)
    assert not r.replica_down(0)  # once
    assert r.route([3, 3], [0, 0]) == (1, False)  # its prefixes are forgotten
    assert all(r.route([i, i], [0, 0]).replica == 1 for i in range(4))
    assert r.replica_down(1)
    with pytest.raises(LookupError):
        r.route([3, 3], [0, 0])


def test_table_is_bounded() -> None:
    r = ReplicaRouter(2, block_size=1, table_size=8)
    for i in range(20):
        r.route([i, i + 1], [0, 0])
    assert r.statistics().remembered_prefixes == 8


def test_keys_are_the_prefix_caches_block_hashes() -> None:
    from actorllm.core.kv_cache.block_hash import BlockHasher

    r = ReplicaRouter(2, block_size=4)
    tokens = list(range(10))
    expected: list[bytes] = []
    BlockHasher(4).extend(expected, tokens, None)
    assert r.prefix_keys(tokens) == expected
