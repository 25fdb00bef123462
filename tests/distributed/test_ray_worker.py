"""A remote rank 0 (worker/remote.py): with the Ray backend every replica's whole
Worker is a Ray actor in its replica's placement group, driven from the worker thread.

``-dp 2 -dpb ray -tp 1`` gives DP=1's greedy tokens with both replicas working;
``-tp 2 -dpb ray`` (rank 0 and rank 1 both actors) gives TP=1's; ``ray.kill`` of a
replica's worker actor (or a kill -9 of its rank 1) mid-batch loses nothing; control
calls reach the remote ranks. Each engine loads its model in Ray worker processes of the
session's local cluster: slow on a loaded 2-core box."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from actorllm import LLM
from actorllm.distributed.ray_connect import RayClusterError, connect
from actorllm.engine import AsyncEngine
from actorllm.engine.config.engine_config import EngineConfig, EngineConfigError
from actorllm.worker.ray_host import RemoteHost, decode_step, encode_step
from actorllm.worker.remote import RemoteWorker
from tests.distributed.test_tensor_parallel import ENGINE, _batch
from tests.distributed.test_tp_dp import _batch_killing
from tests.entrypoints.serve_process import ServeProcess
from tests.helpers.ray_cluster import LocalRayCluster
from tests.helpers.ray_ranks import kv_allocated, lora_pinned


def _remote(engine: AsyncEngine) -> list[RemoteWorker]:
    workers = [replica.worker for replica in engine._parts.replicas]
    assert all(isinstance(w, RemoteWorker) for w in workers)
    return workers  # type: ignore[return-value]


def _rank_of(worker: object) -> int:
    return int(worker.rank)  # type: ignore[attr-defined]


def _alive_pgs() -> set[str]:
    table = connect().util.placement_group_table()
    return {pg["name"] for pg in table.values() if pg["state"] == "CREATED"}


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_dp2_tp1_replicas_are_ray_actors_and_survive_a_killed_one(
    llama: str,
    reference: list[list[int]],
    anyio_backend: str,
    ray_cluster: LocalRayCluster,
    tmp_path: Path,
) -> None:
    async with AsyncEngine.open(
        llama,
        data_parallel_size=2,
        data_parallel_backend="ray",
        profiler_dir=str(tmp_path),
        **ENGINE,
    ) as engine:
        w0, w1 = _remote(engine)
        cluster = set(ray_cluster.processes())
        assert {w0.host.placement.pid, w1.host.placement.pid} <= cluster
        assert os.getpid() not in {w0.host.placement.pid, w1.host.placement.pid}
        assert w0.host.pg_name.startswith("actorllm-dp0-worker-")
        assert {w0.host.pg_name, w1.host.pg_name} <= _alive_pgs()

        await engine.start_profile()  # each replica's worker runs its own profiler
        assert await _batch(engine, "a") == reference
        await engine.stop_profile()
        pids = sorted(int(p.name.split("-")[1]) for p in tmp_path.glob("*.trace.json"))
        assert pids == sorted([w0.host.placement.pid, w1.host.placement.pid])
        engines = (await engine.get_stats()).engines
        assert all(e.steps_done > 0 for e in engines)  # both replicas took work

        # Control calls reach each replica's remote worker: one result per rank.
        stats = await engine.collective_rpc("statistics")
        assert [s.rank for s in stats] == [0, 0]
        assert [s.remote.pid for s in stats] == [w0.host.placement.pid, w1.host.placement.pid]
        assert all(s.remote.steps > 0 and s.remote.last_reply_bytes > 0 for s in stats)
        await engine.sleep(1)
        assert await engine.collective_rpc(kv_allocated) == [False, False]
        await engine.wake_up()
        assert await engine.collective_rpc(kv_allocated) == [True, True]
        assert await engine.reset_prefix_cache()

        # ray.kill of replica 1's worker while both replicas hold requests: its pending
        # step fails with RayActorError, core1 restarts, the worker is replaced.
        ledger, old_pg, ray = engine._ctx.ledger, w1.host.pg_name, connect()

        async def kill() -> None:
            assert ledger.load(1) > 0
            ray.kill(w1.host.actor, no_restart=True)
            killed = time.monotonic()
            while w1.host.broken is None and w1.host.generation == 0:
                await anyio.sleep(0.01)
            assert time.monotonic() - killed < 2.0

        assert await _batch_killing(engine, kill) == reference
        assert w1.host.generation == 1 and w1.host.pg_name != old_pg
        assert w0.host.generation == 0 and w0.host.broken is None
        assert old_pg not in _alive_pgs()
        assert await _batch(engine, "after") == reference
        restarts: Any = [e.actor_restarts for e in (await engine.get_stats()).engines]
        assert restarts[0] == 0 and restarts[1] > 0

        # Killed while idle: the driver's monitor sees it without a step, core0 restarts
        # and its reset job replaces the host before any request needs it.
        ray.kill(w0.host.actor, no_restart=True)
        with anyio.fail_after(120):
            while w0.host.generation == 0 or w0.host.broken is not None:
                await anyio.sleep(0.05)
        assert await _batch(engine, "idle") == reference
        hosts = [w.host for w in (w0, w1)]
    # Closed: both replicas' actors and placement groups are gone.
    assert all(h.actor is None for h in hosts)
    assert not {h.pg_name for h in hosts} & _alive_pgs()


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_tp2_with_a_remote_rank0_equals_tp1_and_survives_killed_ranks(
    llama: str,
    reference: list[list[int]],
    anyio_backend: str,
    ray_cluster: LocalRayCluster,
) -> None:
    async with AsyncEngine.open(
        llama,
        tensor_parallel_size=2,
        distributed_executor_backend="ray",
        step_timeout_s=3.0,
        **ENGINE,
    ) as engine:
        (worker,) = _remote(engine)
        assert await _batch(engine, "a") == reference
        stats = await engine.collective_rpc("statistics")
        assert [s.rank for s in stats] == [0, 1]
        rank1 = stats[0].tensor_parallel.ranks.ranks[0]  # placed by the host's group
        assert {worker.host.placement.pid, rank1.pid} <= set(ray_cluster.processes())
        assert stats[0].tensor_parallel.ranks.placement_group == worker.host.pg_name
        # A lambda travels by value (cloudpickle) to the host and on to rank 1.
        assert await engine.collective_rpc(lambda w: w.rank) == [0, 1]
        # This module is not importable in a Ray worker (pytest imports it from a path only
        # this process has): the call fails with the host's error, the host lives on.
        with pytest.raises(Exception, match="No module named"):
            await engine.collective_rpc(_rank_of)
        assert worker.host.broken is None and worker.host.generation == 0

        # kill -9 of rank 1 (an actor the remote rank 0 owns): the host's group is
        # replaced by the host itself, rank 0 stays.
        async def kill_rank1() -> None:
            os.kill(rank1.pid, signal.SIGKILL)

        assert await _batch_killing(engine, kill_rank1) == reference
        stats = await engine.collective_rpc("statistics")
        assert stats[0].tensor_parallel.generation == 1 and worker.host.generation == 0

        # ray.kill of rank 0's actor: its ranks die with it, the whole group is replaced.
        async def kill_rank0() -> None:
            connect().kill(worker.host.actor, no_restart=True)

        assert await _batch_killing(engine, kill_rank0) == reference
        assert worker.host.generation == 1

        # rank 0's actor hung (SIGSTOP): the step timeout restarts the core, whose reset
        # gives the host step_timeout_s more, then kills it and places a new one.
        async def stop_rank0() -> None:
            os.kill(worker.host.placement.pid, signal.SIGSTOP)

        assert await _batch_killing(engine, stop_rank0) == reference
        assert worker.host.generation == 2
        assert [s.rank for s in await engine.collective_rpc("statistics")] == [0, 1]
        assert await _batch(engine, "after") == reference


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_dp2_tp2_places_every_rank_with_ray(
    llama: str,
    reference: list[list[int]],
    anyio_backend: str,
    ray_cluster: LocalRayCluster,
) -> None:
    """``-tp 2 -dp 2 -dpb ray``: four actors, two placement groups of two bundles; the
    engine process holds no rank."""
    async with AsyncEngine.open(
        llama, tensor_parallel_size=2, data_parallel_size=2, data_parallel_backend="ray", **ENGINE
    ) as engine:
        w0, w1 = _remote(engine)
        assert await _batch(engine, "a") == reference
        stats = await engine.collective_rpc("statistics")
        assert [s.rank for s in stats] == [0, 1, 0, 1]
        pids = {stats[i].remote.pid for i in (0, 2)}
        pids |= {stats[i].tensor_parallel.ranks.ranks[0].pid for i in (0, 2)}
        assert len(pids) == 4 and pids <= set(ray_cluster.processes())
        assert [stats[i].tensor_parallel.ranks.placement_group for i in (0, 2)] == [
            w0.host.pg_name,
            w1.host.pg_name,
        ]


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_a_replaced_remote_worker_is_pinned_again(
    llama: str, anyio_backend: str, ray_cluster: LocalRayCluster, tmp_path: Path
) -> None:
    """The Ray backend replaces a killed worker's host with a new Worker that holds no
    adapter: the reset job of the restarted core pins the engine's pinned adapters again
    before its first step."""
    from actorllm.core.lora import LoRARequest
    from tests.helpers.lora import make_adapter

    sql = LoRARequest("sql", 1, str(make_adapter(llama, tmp_path / "sql", r=8, seed=5)))
    async with AsyncEngine.open(
        llama, distributed_executor_backend="ray", enable_lora=True, max_loras=2, **ENGINE
    ) as engine:
        (worker,) = _remote(engine)
        await engine.add_lora(sql)
        assert await engine.pin_lora("sql")
        assert await engine.collective_rpc(lora_pinned) == [["sql"]]
        connect().kill(worker.host.actor, no_restart=True)
        with anyio.fail_after(120):
            while worker.host.generation == 0 or worker.host.broken is not None:
                await anyio.sleep(0.05)
        assert await engine.collective_rpc(lora_pinned) == [["sql"]]


def test_kv_connector_with_ray_is_refused_naming_it(llama: str) -> None:
    with pytest.raises(EngineConfigError, match="not built for ray") as info:
        EngineConfig(model=llama, data_parallel_backend="ray", kv_connector="offload")
    assert info.value.param == "kv_connector"
    config = EngineConfig(model=llama, data_parallel_size=2, data_parallel_backend="ray")
    assert config.distributed_executor_backend == "ray"  # TP 1: the worker is the actor


def test_the_step_codec_round_trips_a_grammar_bitmask() -> None:
    import numpy as np

    from actorllm.core.sampling_params import SamplingParams
    from actorllm.core.scheduler_output import GrammarBitmask, NewRequestData, SchedulerOutput

    new = NewRequestData(
        req_id="a",
        prompt_token_ids=[1, 2],
        output_token_ids=[],
        sampling_params=SamplingParams(temperature=0.0, logit_bias={5: 1.0}),
        block_ids=([1, 2],),
        num_computed_tokens=0,
    )
    mask = np.arange(6, dtype=np.int32).reshape(1, 6)  # [1 request, 6 words]
    so = SchedulerOutput(
        step_id=3,
        scheduled_new_reqs=[new],
        scheduled_cached_reqs=[],
        num_scheduled_tokens={"a": 2},
        total_num_scheduled_tokens=2,
        grammar_bitmask=GrammarBitmask(req_ids=["a"], bitmask=mask),
    )
    back = decode_step(encode_step(so))
    assert back.scheduled_new_reqs == so.scheduled_new_reqs
    assert back.grammar_bitmask is not None
    np.testing.assert_array_equal(back.grammar_bitmask.bitmask, mask)


@pytest.mark.slow
def test_a_replica_that_fails_to_start_stops_the_others(
    llama: str, monkeypatch: pytest.MonkeyPatch, ray_cluster: LocalRayCluster
) -> None:
    """The replicas are placed and loaded at once; replica 1's failure fails the engine
    and replica 0's actor and placement group do not outlive it."""
    hosts: list[RemoteHost] = []
    start = RemoteHost.start

    def failing_start(self: RemoteHost, blocks: int | None = None) -> Any:
        hosts.append(self)
        if self.replica == 1:
            raise RayClusterError("replica 1 cannot be placed (test)")
        return start(self, blocks)

    monkeypatch.setattr(RemoteHost, "start", failing_start)
    with pytest.raises(RayClusterError, match="test"):
        LLM(llama, data_parallel_size=2, data_parallel_backend="ray", **ENGINE)
    assert sorted(h.replica for h in hosts) == [0, 1]
    (host0,) = [h for h in hosts if h.replica == 0]
    assert host0.actor is None and host0.pg_name not in _alive_pgs()


@pytest.mark.slow
def test_serve_dp2_over_ray_answers(llama: str, ray_cluster: LocalRayCluster) -> None:
    """``actorllm serve MODEL -dp 2 -dpb ray`` (RAY_ADDRESS from the fixture): both
    replicas' workers are actors of the cluster, the server answers and shows both
    replicas' schedulers."""
    with ServeProcess([llama, "-dp", "2", "-dpb", "ray", "--max-model-len", "256"]) as srv:
        body = {"model": llama, "prompt": "Once upon a time", "max_tokens": 4}
        reply = httpx.post(srv.url + "/v1/completions", json=body, timeout=60.0)
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] == 4
        metrics = httpx.get(srv.url + "/metrics", timeout=10.0).text
        assert 'engine="1"' in metrics
        prefixes = {name.rsplit("-", 1)[0] for name in _alive_pgs()}
        assert {"actorllm-dp0-worker", "actorllm-dp1-worker"} <= prefixes
