"""Scale-out across hosts: a Ray cluster of three hosts in network namespaces (one CPU
each, so every rank or replica takes a host of its own), the head and this process (the
driver) on the root namespace's address on the same bridge
(:mod:`actorllm.testing.netns_cluster`). Only the veth addresses are routable between
hosts, so a rank that used 127.0.0.1 or the wrong interface would fail here.

``-tp 2`` with one rank per host, ``-dp 2`` with a replica per host and ``-pp 2`` with a
stage on a namespace host give the single worker's greedy tokens; a partitioned host and
a lost host mid-batch cost a restart on the remaining host and nothing else; start-up
names the node that lacks the model's files or runs other versions, and a dead head is
reported in seconds."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from actorllm import LLM
from actorllm.actors import SupervisorGaveUp
from actorllm.distributed.ray_connect import RayClusterError, connect
from actorllm.engine import AsyncEngine
from actorllm.testing.netns_cluster import REPO_ROOT, HostSpec, NetnsCluster
from actorllm.worker.remote import RemoteWorker
from tests.distributed.test_tensor_parallel import ENGINE, _batch
from tests.distributed.test_tp_dp import _batch_killing
from tests.helpers.ray_ranks import node_ip

COLLECTIVE_TIMEOUT_S = 3.0  # a partitioned rank's all-reduce fails after this


def _remote(engine: AsyncEngine) -> list[RemoteWorker]:
    workers = [replica.worker for replica in engine._parts.replicas]
    assert all(isinstance(w, RemoteWorker) for w in workers)
    return workers  # type: ignore[return-value]


@pytest.fixture
def supervisor_records() -> Iterator[list[logging.LogRecord]]:
    """What the supervisors log, from a handler on their own logger: caplog's sits on the
    root, which a dictConfig applied in this process by an earlier test (a server's
    ``--log-config-file``) can cut off (a disabled logger, or one that stops
    propagating)."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("actorllm.actors")
    handler, was_disabled, was_level = Keep(logging.ERROR), logger.disabled, logger.level
    logger.disabled = False
    if logger.getEffectiveLevel() > logging.ERROR:
        logger.setLevel(logging.ERROR)
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.disabled, logger.level = was_disabled, was_level


def _host_ips(cluster: NetnsCluster) -> set[str]:
    return {node.ip for node in cluster.hosts.values()}


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_tp2_one_rank_per_host_survives_a_partition_and_a_lost_host(
    llama: str, reference: list[list[int]], anyio_backend: str, netns_cluster: NetnsCluster
) -> None:
    cluster = netns_cluster
    async with AsyncEngine.open(
        llama,
        tensor_parallel_size=2,
        distributed_executor_backend="ray",
        tp_collective_timeout_s=COLLECTIVE_TIMEOUT_S,
        **ENGINE,
    ) as engine:
        (worker,) = _remote(engine)
        ips = await engine.collective_rpc(node_ip)  # rank 0's node, rank 1's
        assert len(set(ips)) == 2 and set(ips) <= _host_ips(cluster)
        assert worker.host.placement.node_ip == ips[0]
        assert await _batch(engine, "a") == reference

        # Rank 1's host partitioned mid-batch: rank 0's all-reduce fails within the
        # collective timeout (Ray declares the node dead sooner), the core restarts and
        # the host replaces its rank 1, which Ray places on the spare host.
        lost = cluster.host_of(ips[1])

        async def partition() -> None:
            cluster.partition(lost)

        started = time.monotonic()
        try:
            assert await _batch_killing(engine, partition) == reference
        finally:
            await anyio.to_thread.run_sync(cluster.restore, lost)  # a fresh host there
        took = time.monotonic() - started
        moved = await engine.collective_rpc(node_ip)
        assert moved[0] == ips[0] and moved[1] not in ips
        assert took < COLLECTIVE_TIMEOUT_S + 90  # detection, a rank reloaded, a host back
        restarts: Any = (await engine.get_stats()).engines[0].actor_restarts
        assert restarts > 0

        # Rank 0's host lost (link down, then every process in it killed): the driver's
        # pending step fails once Ray declares the node dead; a new placement group on
        # the hosts left, the model loaded there, the requests recomputed.
        gone = cluster.host_of(moved[0])
        generation = worker.host.generation

        async def lose_host() -> None:
            await anyio.to_thread.run_sync(cluster.kill_host, gone)

        try:
            assert await _batch_killing(engine, lose_host) == reference
            assert worker.host.generation == generation + 1
            final = await engine.collective_rpc(node_ip)
            assert gone.ip not in final and len(set(final)) == 2
            assert await _batch(engine, "after") == reference
        finally:
            await anyio.to_thread.run_sync(cluster.restore, gone)


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_dp2_replicas_on_two_hosts_and_a_lost_one_with_no_room_left(
    llama: str,
    reference: list[list[int]],
    anyio_backend: str,
    netns_cluster: NetnsCluster,
    supervisor_records: list[logging.LogRecord],
) -> None:
    """A replica per host gives one worker's tokens. Then the third host is taken (a
    placement group of someone else's) and replica 1's host is lost mid-batch: there is
    no room to replace its worker, so replica 1 gives up at once, saying so, and its
    requests finish on replica 0 with the same tokens."""
    cluster = netns_cluster
    records = supervisor_records
    ray = connect()
    from ray.util.placement_group import placement_group, remove_placement_group

    async with AsyncEngine.open(
        llama, data_parallel_size=2, data_parallel_backend="ray", **ENGINE
    ) as engine:
        workers = _remote(engine)
        hosts = [w.host.placement.node_ip for w in workers]
        assert len(set(hosts)) == 2 and set(hosts) <= _host_ips(cluster)
        assert await _batch(engine, "dp") == reference
        assert all(e.steps_done > 0 for e in (await engine.get_stats()).engines)

        squatter = placement_group([{"CPU": 1}], name="someone-else")
        assert ray.get(squatter.ready(), timeout=60) is not None
        gone = cluster.host_of(hosts[1])

        async def lose_host() -> None:
            await anyio.to_thread.run_sync(cluster.kill_host, gone)

        try:
            assert await _batch_killing(engine, lose_host) == reference
            assert [r.index for r in engine._live()] == [0]
            gave_up = [r.exc_info[1] for r in records if r.exc_info]
            assert any(
                isinstance(e, SupervisorGaveUp) and "no capacity is left" in str(e) for e in gave_up
            )
        finally:
            remove_placement_group(squatter)
            await anyio.to_thread.run_sync(cluster.restore, gone)


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_pp2_stages_on_two_hosts_and_a_lost_stage_host(
    llama: str, reference: list[list[int]], anyio_backend: str, netns_cluster: NetnsCluster
) -> None:
    """``-pp 2`` over Ray: the last stage stays with the engine on the head host, stage 0
    is a Ray actor on a namespace host, and the hidden states between them cross the veth
    network; the single worker's tokens. Stage 0's host lost mid-batch: the pipeline is
    restarted with stage 0 on the spare host, and no request is lost or changed."""
    cluster = netns_cluster
    async with AsyncEngine.open(
        llama,
        pipeline_parallel_size=2,
        distributed_executor_backend="ray",
        tp_collective_timeout_s=COLLECTIVE_TIMEOUT_S,
        **ENGINE,
    ) as engine:
        assert await _batch(engine, "pp") == reference
        stats = await engine.collective_rpc("statistics")
        (stage0,) = stats[0].tensor_parallel.ranks.ranks
        assert stage0.node_ip in _host_ips(cluster)  # not the head host's
        assert stats[1].comm.pipe_bytes_sent == stats[0].comm.pipe_bytes_received > 0
        gone = cluster.host_of(stage0.node_ip)

        async def lose_host() -> None:
            await anyio.to_thread.run_sync(cluster.kill_host, gone)

        try:
            assert await _batch_killing(engine, lose_host) == reference
            stats = await engine.collective_rpc("statistics")
            (moved,) = stats[0].tensor_parallel.ranks.ranks
            assert moved.node_ip in _host_ips(cluster) - {gone.ip}
        finally:
            await anyio.to_thread.run_sync(cluster.restore, gone)


def test_start_up_names_the_node_without_the_model_or_with_other_versions(
    llama: str, netns_cluster: NetnsCluster, tmp_path: Path
) -> None:
    """A fourth host that does not see the model's directory (an empty tmpfs over it,
    in its own mount namespace) and whose torch is another version (a distribution
    first on its path says 2.0.0); ``-tp 4`` needs every host, and is refused before any
    model is loaded, naming that host alone."""
    other = tmp_path / "other-site"
    meta = other / "torch-2.0.0.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.0.0\n")
    odd = netns_cluster.add_host(
        HostSpec(hide=(llama,), env={"PYTHONPATH": f"{other}:{REPO_ROOT}"})
    )
    try:
        started = time.monotonic()
        with pytest.raises(RayClusterError) as refused:
            LLM(llama, tensor_parallel_size=4, distributed_executor_backend="ray", **ENGINE)
        message = str(refused.value)
        assert f"node {odd.ip}: torch 2.0.0 (the engine has" in message
        assert f"missing {Path(llama).resolve()}/" in message
        assert not any(f"node {ip}" in message for ip in _host_ips(netns_cluster) - {odd.ip})
        assert time.monotonic() - started < 60
    finally:
        netns_cluster.remove_host(odd)


def test_an_unreachable_head_is_named_within_seconds(
    llama: str, netns_cluster: NetnsCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No host answers at .99 of the subnet (nor any route beyond it)."""
    connect().shutdown()  # this process connects again when the variable is restored
    assert netns_cluster.subnet is not None
    dead = f"{netns_cluster.subnet.prefix}.99:6379"
    monkeypatch.setenv("RAY_ADDRESS", dead)
    started = time.monotonic()
    with pytest.raises(RayClusterError, match=f"the Ray head at {dead} \\(RAY_ADDRESS\\)"):
        LLM(llama, tensor_parallel_size=2, distributed_executor_backend="ray", **ENGINE)
    assert time.monotonic() - started < 15
