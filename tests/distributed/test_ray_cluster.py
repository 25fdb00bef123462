"""The local Ray cluster fixture: actors placed by placement group run under our head."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from actorllm.distributed.ray_connect import connect
from tests.helpers.ray_cluster import LocalRayCluster, descendants


def test_placed_actor_runs_under_the_fixture_head(ray_cluster: LocalRayCluster) -> None:
    ray = connect()  # through RAY_ADDRESS, which the fixture set
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_PACK")
    ray.get(pg.ready(), timeout=60)
    try:

        @ray.remote(num_cpus=1)
        class Probe:
            def pid(self) -> int:
                return os.getpid()

        strategy = PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_bundle_index=1
        )
        probe = Probe.options(scheduling_strategy=strategy).remote()
        # The actor is a process of our head (so the fixture's teardown sees it stopped).
        assert ray.get(probe.pid.remote(), timeout=60) in ray_cluster.processes()
        ray.kill(probe)
    finally:
        remove_placement_group(pg)


def test_descendants_walks_grandchildren() -> None:
    shell = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"])
    try:
        deadline = time.monotonic() + 10.0
        while len(descendants(shell.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        below = descendants(os.getpid())
        assert shell.pid in below
        assert set(descendants(shell.pid)) < set(below)
        assert len(descendants(shell.pid)) == 2
    finally:
        for pid in descendants(shell.pid):
            os.kill(pid, signal.SIGKILL)
        shell.wait()
