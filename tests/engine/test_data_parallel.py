"""Data parallel (``data_parallel_size=2``): replicas behind one router (engine/actors/assembly.py,
engine/actors/router.py, engine/scheduling/routing.py)."""

from __future__ import annotations

import math

import anyio
import pytest

from actorllm.core.sampling_params import SamplingParams
from actorllm.engine import EngineDeadError
from actorllm.testing.engine_harness import (
    check_invariants,
    engine_context,
    inject_fault,
    open_test_engine,
    wait_idle,
)

pytestmark = pytest.mark.anyio

N_REQUESTS = 24
ENGINE = {"step_delay_s": 0.001, "max_num_seqs": 8, "max_num_batched_tokens": 64, "block_size": 8}

Results = dict[int, tuple[list[int], str | None]]


def prompt(i: int) -> str:
    return f"request {i} says " + "hello " * (i % 5)


def params(i: int) -> SamplingParams:
    return SamplingParams(max_tokens=8 + i % 9, temperature=0.0 if i % 2 else 0.8, seed=i)


async def run_batch(engine, n: int = N_REQUESTS) -> Results:
    results: Results = {}

    async def one(i: int) -> None:
        last = None
        async for out in engine.generate(prompt(i), params(i), request_id=f"r{i}"):
            last = out
        assert last is not None
        results[i] = (last.outputs[0].token_ids, last.outputs[0].finish_reason)

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)
    return results


@pytest.fixture(scope="module")
def reference() -> Results:
    async def main() -> Results:
        async with open_test_engine(**ENGINE) as engine:
            return await run_batch(engine)

    return anyio.run(main, backend="trio")


async def test_two_replicas_give_the_same_tokens_and_both_work(reference):
    async with open_test_engine(data_parallel_size=2, **ENGINE) as engine:
        assert engine.data_parallel_size == 2
        assert await run_batch(engine) == reference
        stats = await engine.get_stats()
        assert [e.engine for e in stats.engines] == [0, 1]
        assert all(e.steps_done > 0 for e in stats.engines)  # both replicas took work
        assert stats.steps_done == sum(e.steps_done for e in stats.engines)
        routing = engine.statistics().routing
        assert routing is not None and all(n > 0 for n in routing.routed)
        await check_invariants(engine)


async def test_shared_prefix_requests_land_on_one_replica():
    system = "You are a helpful assistant. " * 8  # several full blocks
    async with open_test_engine(data_parallel_size=2, **ENGINE) as engine:
        # Spread some unrelated work first, so the replicas' loads differ a little.
        await run_batch(engine, 4)
        await wait_idle(engine)
        before = [engine_context(engine, i).admission.steps_done for i in (0, 1)]
        routed_before = _routed(engine)

        async def one(i: int) -> None:
            async for _ in engine.generate(system + f"question {i}", SamplingParams(max_tokens=4)):
                pass

        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(one, i)
        after = [engine_context(engine, i).admission.steps_done for i in (0, 1)]
        worked = [i for i in (0, 1) if after[i] > before[i]]
        assert len(worked) == 1  # every request of that prefix ran on one replica
        routed = [n - m for n, m in zip(_routed(engine), routed_before, strict=True)]
        assert routed[worked[0]] == 6 and routed[1 - worked[0]] == 0
        stats = await engine.get_stats()
        assert stats.engines[worked[0]].prefix_cache_hits > 0
        routing = engine.statistics().routing
        assert routing is not None and routing.affinity_hits >= 5
        await check_invariants(engine)


@pytest.mark.parametrize("actor", ["scheduler", "executor", "worker"])
async def test_a_dead_replica_moves_its_requests_and_loses_nothing(actor, reference):
    config = {**ENGINE, "max_restarts": 2, "restart_window_s": 60.0}
    async with open_test_engine(data_parallel_size=2, **config) as engine:
        # Replica 1 crashes at every step from its third on, until its core gives up.
        inject_fault(engine, actor, replica=1, at_step=2, times=1000)
        assert await run_batch(engine) == reference
        assert engine._parts.live == {0}
        routing = engine.statistics().routing
        assert routing is not None and routing.live == [0]
        assert not engine.is_dead
        # The survivor takes new work, and control calls reach it alone.
        assert await run_batch(engine, 4) == {i: reference[i] for i in range(4)}
        assert len(await engine.collective_rpc(lambda w: 1)) == 1
        await check_invariants(engine)


async def test_the_last_replica_to_die_kills_the_engine():
    config = {**ENGINE, "max_restarts": 1, "restart_window_s": 60.0}
    with pytest.raises(EngineDeadError):
        async with open_test_engine(data_parallel_size=2, **config) as engine:
            for replica in (0, 1):
                inject_fault(engine, "scheduler", replica=replica, times=1000)
            with anyio.fail_after(30):
                dead = False
                try:
                    await run_batch(engine, 6)
                except* EngineDeadError:  # one per request caught in the death
                    dead = True
                assert dead
                await anyio.sleep(math.inf)  # the async with block raises


async def test_control_plane_reaches_every_replica():
    async with open_test_engine(data_parallel_size=2, **ENGINE) as engine:
        await run_batch(engine, 6)
        ranks = await engine.collective_rpc(lambda w: id(w))
        assert ranks == [id(r.worker) for r in engine._parts.replicas]  # replica order
        assert await engine.reset_prefix_cache()
        await engine.sleep(1)
        assert await engine.is_sleeping()
        assert all(engine_context(engine, i).admission.sleep_level == 1 for i in (0, 1))
        await engine.wake_up()
        assert not await engine.is_sleeping()
        assert await run_batch(engine, 6) == await _reference_subset(6)
        with pytest.raises(ValueError, match="no KV connector"):
            await engine.set_kv_connector_enabled(True)
        assert not await engine.is_kv_connector_enabled()
        await check_invariants(engine)


def _routed(engine) -> list[int]:
    routing = engine.statistics().routing
    assert routing is not None
    return list(routing.routed)


async def _reference_subset(n: int) -> Results:
    async with open_test_engine(**ENGINE) as engine:
        return await run_batch(engine, n)
