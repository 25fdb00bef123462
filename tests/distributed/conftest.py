"""Fixtures for the distributed tests: a local single-node Ray cluster for the whole
session, and the tiny llama checkpoint with its single-worker greedy tokens, which the
TP, TP x DP, Ray-worker and multi-host modules share (built once per session, not once
per module)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.distributed.test_tensor_parallel import _checkpoint, _generate
from tests.helpers.ray_cluster import LocalRayCluster, is_running

NUM_CPUS = 4  # Ray's logical CPUs: what placement groups may reserve, not cores


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A 2-layer llama, vocabulary 4093 (the last rank's shard is padded); under /tmp, so
    every host of the multi-host cluster reads it. Tests read it, none writes it."""
    return _checkpoint(tmp_path_factory.mktemp("tp-llama"), "llama")


@pytest.fixture(scope="session")
def reference(llama: str) -> list[list[int]]:
    """``llama``'s greedy tokens for PROMPTS on one worker (DP=1, TP=1), in this process."""
    return _generate(llama, 1)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[LocalRayCluster]:
    """A `ray start --head` cluster with 4 (logical) CPUs, a bundle for each rank of a
    ``-tp 2 -dp 2`` engine, its address exported as ``RAY_ADDRESS`` so
    ``ray.init(address="auto")`` finds it; stopped (driver disconnected first) at session end,
    whatever the tests did; its teardown fails if a process of the cluster outlives it.
    Skipped only where the ``ray`` extra is not installed; the dev extra (what ``make test``
    installs) includes it, so CI runs these tests."""
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install actorllm[ray])")
    import ray

    cluster = LocalRayCluster(num_cpus=NUM_CPUS)
    cluster.start()
    saved = os.environ.get("RAY_ADDRESS")
    os.environ["RAY_ADDRESS"] = cluster.address
    try:
        yield cluster
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if saved is None:
            os.environ.pop("RAY_ADDRESS", None)
        else:
            os.environ["RAY_ADDRESS"] = saved
        running = cluster.processes()
        cluster.stop()
        left = [pid for pid in running if is_running(pid)]
        assert not left, f"Ray processes outlived the cluster: {left}"
        assert not cluster.temp_dir.exists()
