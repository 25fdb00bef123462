"""Ranks as Ray actors (the group under the ray launcher): placed by placement group,
joined with the engine-side rank 0 over gloo, and seen dying (kill -9) within a second."""

from __future__ import annotations

import os
import queue
import signal
import socket
import sys
import time

import pytest
import torch
import torch.distributed as dist

from actorllm.distributed.ray_connect import RayClusterError, connect
from actorllm.distributed.ray_ranks import RayRankGroup
from tests.helpers import ray_ranks
from tests.helpers.ray_cluster import LocalRayCluster, is_running

pytestmark = pytest.mark.usefixtures("ray_cluster")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _exits() -> tuple[queue.Queue[tuple[int, str]], object]:
    exits: queue.Queue[tuple[int, str]] = queue.Queue()
    return exits, lambda rank, why: exits.put((rank, why))


@pytest.mark.parametrize("fail", [False, True])
def test_rank_joins_rank0_over_gloo_and_exit_is_reported_only_when_unasked(fail: bool) -> None:
    ray = connect()
    init = f"tcp://{ray.util.get_node_ip_address()}:{_free_port()}"
    exits, on_exit = _exits()
    group = RayRankGroup(world_size=2, bundle={"CPU": 1})
    placed = group.start(ray_ranks.sum_then_wait, lambda rank: (rank, 2, init), on_exit)
    try:
        assert [p.rank for p in placed] == [1]
        dist.init_process_group("gloo", init, rank=0, world_size=2, timeout=ray_ranks.TIMEOUT)
        total = torch.tensor([1])
        dist.all_reduce(total)
        assert int(total.item()) == 1 + 2
        dist.broadcast(torch.tensor([int(fail)]), src=0)
        if fail:  # the entry raised while the group was meant to run: reported
            rank, why = exits.get(timeout=30)
            assert rank == 1 and "told to fail" in why
        else:  # it returned after a stop order: the caller stops, nothing reported
            group.stop(grace_s=30)
            assert exits.empty()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        group.stop(grace_s=0)
    assert group.statistics().stopping


def test_killed_rank_is_reported_within_a_second() -> None:
    exits, on_exit = _exits()
    group = RayRankGroup(world_size=2, bundle={"CPU": 1})
    (placed,) = group.start(ray_ranks.sleep_forever, lambda rank: (rank,), on_exit)
    try:
        time.sleep(0.5)  # run() has begun
        killed_at = time.monotonic()
        os.kill(placed.pid, signal.SIGKILL)
        rank, why = exits.get(timeout=10)
        seen_after = time.monotonic() - killed_at
        assert rank == 1
        assert "ActorDiedError" in why
        assert seen_after < 1.0, f"death seen after {seen_after:.2f}s"
        assert group.statistics().exited == 1
    finally:
        group.stop(grace_s=0)


def test_stop_kills_ranks_and_releases_the_bundles(ray_cluster: LocalRayCluster) -> None:
    ray = connect()
    exits, on_exit = _exits()
    group = RayRankGroup(world_size=3, bundle={"CPU": 1})
    placed = group.start(ray_ranks.sleep_forever, lambda rank: (rank,), on_exit)
    assert sorted(p.rank for p in placed) == [1, 2]
    cpus = ray_cluster.num_cpus
    group.stop(grace_s=0)
    deadline = time.monotonic() + 10
    while any(is_running(p.pid) for p in placed) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(is_running(p.pid) for p in placed)
    assert exits.empty()  # a stop is not a death
    deadline = time.monotonic() + 10
    while ray.available_resources().get("CPU", 0) < cpus and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ray.available_resources().get("CPU", 0) == cpus


def test_more_ranks_than_the_cluster_holds_is_refused(ray_cluster: LocalRayCluster) -> None:
    world = ray_cluster.num_cpus + 2  # one bundle more than the cluster's CPUs
    group = RayRankGroup(world_size=world, bundle={"CPU": 1}, ready_timeout_s=1.0)
    # Refused at once: the cluster's nodes could never hold the bundles.
    with pytest.raises(RayClusterError, match=rf"needs {world - 1} bundle\(s\) of .* can hold"):
        group.start(ray_ranks.sleep_forever, lambda rank: (rank,), lambda rank, why: None)


def test_no_cluster_or_no_ray_is_refused_naming_the_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ray = connect()
    monkeypatch.setattr(ray, "is_initialized", lambda: False)

    def no_cluster(**kwargs: object) -> None:
        raise ConnectionError("Could not find any running Ray instance.")

    monkeypatch.setattr(ray, "init", no_cluster)
    with pytest.raises(RayClusterError, match="ray start --head") as info:
        connect()
    assert info.value.param == "distributed_executor_backend"
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(RayClusterError, match=r"pip install 'actorllm\[ray\]'"):
        connect()
