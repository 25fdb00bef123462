"""Tensor parallel inside data parallel (``tensor_parallel_size=2, data_parallel_size=2``):
each replica owns its own rank group (engine/actors/assembly.py, worker/tp_group.py).

DP=2 x TP=2 gives DP=1 x TP=1's greedy tokens with both replicas taking work; control calls
reach every rank of every replica; a rank of replica 1 killed mid-run restarts only
replica 1's group and no request is lost. Two rank processes per engine on a 2-core box:
the ranks run one OpenMP thread each (``OMP_NUM_THREADS=1``, inherited at spawn)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx
import pytest

from actorllm import LLM
from actorllm.engine import AsyncEngine
from actorllm.engine.config.engine_config import EngineConfig, EngineConfigError
from actorllm.worker.tp_errors import RankGroupError
from actorllm.worker.tp_group import TPGroup
from tests.distributed.test_tensor_parallel import (
    ENGINE,
    _batch,
)
from tests.entrypoints.serve_process import ServeProcess
from tests.helpers.ray_ranks import kv_allocated


async def _batch_killing(
    engine: AsyncEngine, kill: Callable[[], Awaitable[None]]
) -> list[list[int]]:
    """The "k" batch, with ``kill`` awaited once it has produced tokens, inside the batch's
    task group; returns the batch's outputs."""
    progress = [0, 0]
    done: list[list[list[int]]] = []

    async def run() -> None:
        done.append(await _batch(engine, "k", progress))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        while progress[0] == 0:
            await anyio.sleep(0.002)
        await kill()
    return done[0]


@pytest.fixture
def one_thread_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def _groups(engine: AsyncEngine) -> list[TPGroup]:
    groups = [replica.worker.tp for replica in engine._parts.replicas]
    assert all(g is not None for g in groups)
    return groups  # type: ignore[return-value]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])  # the rank machinery is loop-agnostic
async def test_dp2_tp2_gives_dp1_tp1_tokens_and_a_killed_rank_restarts_only_its_group(
    llama: str, reference: list[list[int]], anyio_backend: str, one_thread_ranks: None
) -> None:
    """One DP=2 x TP=2 engine (four rank starts are the cost) for the tokens, the
    control calls and a killed rank."""
    async with AsyncEngine.open(
        llama, tensor_parallel_size=2, data_parallel_size=2, **ENGINE
    ) as engine:
        assert await _batch(engine, "a") == reference
        engines = (await engine.get_stats()).engines
        assert [e.engine for e in engines] == [0, 1]
        assert all(e.steps_done > 0 for e in engines)  # both replicas took work

        g0, g1 = _groups(engine)
        assert g0.replica == 0 and g1.replica == 1
        assert g0.rank_pid(1) != g1.rank_pid(1)
        assert g0.statistics().world_size == g1.statistics().world_size == 2

        # Control calls reach every rank of every replica: replica 0's ranks first.
        stats = await engine.collective_rpc("statistics")
        assert [s.rank for s in stats] == [0, 1, 0, 1]
        await engine.sleep(1)
        assert await engine.collective_rpc(kv_allocated) == [False] * 4
        await engine.wake_up()
        assert await engine.collective_rpc(kv_allocated) == [True] * 4

        # kill -9 of replica 1's rank 1 while both replicas hold requests.
        ledger = engine._ctx.ledger
        pid0, pid1 = g0.rank_pid(1), g1.rank_pid(1)

        async def kill() -> None:
            assert ledger.load(1) > 0  # replica 1 has requests in flight
            os.kill(pid1, signal.SIGKILL)
            killed = time.monotonic()
            while g1.broken is None and g1.generation == 0:
                await anyio.sleep(0.01)
            assert time.monotonic() - killed < 1.0

        assert await _batch_killing(engine, kill) == reference
        assert g1.generation == 1 and g1.rank_pid(1) != pid1
        assert g0.generation == 0 and g0.rank_pid(1) == pid0 and g0.broken is None
        assert await _batch(engine, "after") == reference
        restarts: Any = [e.actor_restarts for e in (await engine.get_stats()).engines]
        assert restarts[0] == 0 and restarts[1] > 0


@pytest.mark.slow  # a server process and four rank processes: about 20 s on a loaded box
def test_serve_tp2_dp2_answers(llama: str) -> None:
    """``actorllm serve MODEL -tp 2 -dp 2`` starts (two replicas, a rank process each) and
    serves; the two replicas' schedulers are on /metrics as engine 0 and 1."""
    with ServeProcess([llama, "-tp", "2", "-dp", "2", "--max-model-len", "256"]) as srv:
        body = {"model": llama, "prompt": "Once upon a time", "max_tokens": 4}
        reply = httpx.post(srv.url + "/v1/completions", json=body, timeout=60.0)
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] == 4
        metrics = httpx.get(srv.url + "/metrics", timeout=10.0).text
    assert 'engine="1"' in metrics


def test_data_parallel_backend_ray_conflicting_with_mp_is_refused(llama: str) -> None:
    """``-dpb ray`` puts every replica's ranks on Ray (tests/distributed/test_ray_worker.py);
    an explicit mp executor backend contradicts it."""
    with pytest.raises(EngineConfigError, match="distributed_executor_backend is mp") as info:
        EngineConfig(
            model=llama,
            tensor_parallel_size=2,
            data_parallel_backend="ray",
            distributed_executor_backend="mp",
        )
    assert info.value.param == "data_parallel_backend"


def test_a_replica_that_fails_to_start_stops_the_groups_already_started(
    llama: str, monkeypatch: pytest.MonkeyPatch, one_thread_ranks: None
) -> None:
    """Replica 1's group fails at start: the engine fails, and replica 0's rank process,
    already serving, does not outlive it (the embedding process lives on)."""
    groups: list[TPGroup] = []
    connect = TPGroup.connect

    def failing_connect(self: TPGroup, runner: Any) -> Any:
        groups.append(self)
        if self.replica == 1:
            raise RankGroupError("replica 1's ranks did not come up (test)")
        return connect(self, runner)

    monkeypatch.setattr(TPGroup, "connect", failing_connect)
    with pytest.raises(RankGroupError, match="test"):
        LLM(llama, tensor_parallel_size=2, data_parallel_size=2, **ENGINE)
    assert [g.replica for g in groups] == [0, 1]
    assert all(g.launcher is None for g in groups)  # both stopped: their ranks joined


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_a_replica_that_gives_up_hands_its_requests_over_and_stops_its_ranks(
    llama: str, reference: list[list[int]], anyio_backend: str, one_thread_ranks: None
) -> None:
    """No restarts allowed: replica 1's rank dies, its core gives up, replica 0 finishes
    its requests with the same tokens, and replica 1's rank group is stopped at once."""
    async with AsyncEngine.open(
        llama, tensor_parallel_size=2, data_parallel_size=2, max_restarts=0, **ENGINE
    ) as engine:
        g0, g1 = _groups(engine)

        async def kill() -> None:
            os.kill(g1.rank_pid(1), signal.SIGKILL)

        assert await _batch_killing(engine, kill) == reference
        assert engine._parts.live == {0}
        with anyio.fail_after(10):
            while g1.launcher is not None:  # stopped on its worker thread
                await anyio.sleep(0.01)
        assert g0.generation == 0 and g0.broken is None
        assert await _batch(engine, "after") == reference
