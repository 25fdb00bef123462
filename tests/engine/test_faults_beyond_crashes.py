"""Faults beyond exceptions (issue 18): a hung actor (the watchdog restarts it), a hung
model step (the step timeout crashes the executor), a slow consumer (bounded buffering,
then the request is aborted and its blocks freed). Requests that live through a hang end
exactly as in a fault-free run."""

from __future__ import annotations

import math

import anyio
import pytest

from actorllm.core.sampling_params import SamplingParams
from actorllm.engine.config.engine_config import EngineConfig, EngineConfigError
from actorllm.engine.errors import EngineDeadError, RequestFailedError, SlowConsumerError
from actorllm.testing.engine_harness import check_invariants, inject_fault, open_test_engine

pytestmark = pytest.mark.anyio

ENGINE = {"step_delay_s": 0.001, "max_num_seqs": 8, "block_size": 8, "max_restarts": 50}


def params(i: int) -> SamplingParams:
    return SamplingParams(max_tokens=8 + i % 5, temperature=0.0 if i % 2 else 0.8, seed=i)


async def run_batch(engine, n: int = 8) -> dict[int, tuple[list[int], str | None]]:
    results: dict[int, tuple[list[int], str | None]] = {}

    async def one(i: int) -> None:
        last = None
        async for out in engine.generate(f"hang {i} " + "x " * i, params(i), request_id=f"r{i}"):
            last = out
        assert last is not None
        results[i] = (last.outputs[0].token_ids, last.outputs[0].finish_reason)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i)
    return results


@pytest.fixture(scope="module")
def reference() -> dict[int, tuple[list[int], str | None]]:
    async def main():
        async with open_test_engine(**ENGINE) as engine:
            return await run_batch(engine)

    return anyio.run(main, backend="trio")


@pytest.mark.parametrize(
    ("actor", "at"),
    [("router", 3), ("input_processor", 4), ("scheduler", 6), ("output_processor", 5)],
)
async def test_a_hung_actor_is_restarted_by_the_watchdog(actor, at, reference) -> None:
    async with open_test_engine(actor_message_deadline_s=0.3, **ENGINE) as engine:
        inject_fault(engine, actor, at_message=at, stall_s=math.inf)
        results = await run_batch(engine)
        actor_stats = engine.statistics().actors[actor]
        await check_invariants(engine)
    assert results == reference
    assert (actor_stats.hangs, actor_stats.crashes) == (1, 1)


@pytest.mark.parametrize("timeout_s", [0.2, 1.5])
async def test_closing_cancels_a_hung_actor_after_its_shutdown_timeout(timeout_s) -> None:
    """No watchdog: an actor that holds its message for good is cancelled when the engine
    closes, ``actor_shutdown_timeout_s`` after the close began, not before and not later."""
    async with open_test_engine(actor_shutdown_timeout_s=timeout_s, **ENGINE) as engine:
        inject_fault(engine, "input_processor", at_message=1, stall_s=math.inf)
        with anyio.move_on_after(0.3):  # the request never gets past the hung actor
            async for _ in engine.generate("stuck", params(0), request_id="stuck"):
                pass
        started = anyio.current_time()
    took = anyio.current_time() - started
    assert timeout_s <= took < timeout_s + 2.0, took  # (the default was 5 s)


def test_a_negative_actor_shutdown_timeout_is_refused() -> None:
    with pytest.raises(EngineConfigError, match="actor_shutdown_timeout_s"):
        EngineConfig(actor_shutdown_timeout_s=-1.0)


async def test_a_hung_model_step_times_out_as_an_executor_crash(reference) -> None:
    async with open_test_engine(step_timeout_s=0.3, **ENGINE) as engine:
        inject_fault(engine, "worker", at_step=3, stall_s=1.0)
        results = await run_batch(engine)
        restarts = (await engine.get_stats()).actor_restarts
        await check_invariants(engine)
    assert results == reference
    assert restarts["executor"] >= 1


async def test_a_slow_step_within_the_timeout_is_left_alone(reference) -> None:
    async with open_test_engine(step_timeout_s=2.0, **ENGINE) as engine:
        inject_fault(engine, "worker", at_step=3, stall_s=0.2)
        results = await run_batch(engine)
        restarts = (await engine.get_stats()).actor_restarts
    assert results == reference
    assert restarts["executor"] == 0


async def test_a_slow_consumer_is_aborted_and_its_blocks_freed() -> None:
    async with open_test_engine(max_stream_backlog=4, step_delay_s=0.002, block_size=8) as engine:
        stream = engine.generate("never read", SamplingParams(max_tokens=200, ignore_eos=True))
        first = await stream.__anext__()
        assert not first.finished
        # Stop reading: the engine buffers 4 outputs (CUMULATIVE, the default: each replaces
        # the unread one), then aborts (closes) the request.
        with anyio.fail_after(10):
            while len(engine._ctx.ledger):
                await anyio.sleep(0.01)
        await check_invariants(engine)  # nothing held: the blocks are back
        seen = []
        with pytest.raises(SlowConsumerError, match="4 outputs unread"):
            async for out in stream:
                seen.append(out)
        assert len(seen) == 1 and not seen[0].finished
        # One token a step: the newest output holds the first one's and 4 steps' more.
        assert len(seen[0].outputs[0].token_ids) == len(first.outputs[0].token_ids) + 4
        # A consumer that keeps up is not affected.
        outs = [o async for o in engine.generate("read", SamplingParams(max_tokens=20))]
        assert outs[-1].finished and len(outs[-1].outputs[0].token_ids) == 20


async def test_a_thread_stuck_long_after_the_timeout_ends_every_caller() -> None:
    """The thread stays stuck for 40 step timeouts: each new incarnation gives up waiting
    for it (the recovery window) and crashes again. Every caller still ends, finished or
    with a typed error (the requests charged again and again, or the engine dead), well
    within a bound: nobody waits forever."""
    ends: list[object] = []

    async def one(engine, i: int) -> None:
        try:
            async for out in engine.generate(f"stuck {i}", SamplingParams(max_tokens=20)):
                last = out
            ends.append(last.outputs[0].finish_reason)
        except (EngineDeadError, RequestFailedError) as exc:
            ends.append(type(exc))

    with anyio.fail_after(60):
        try:
            async with open_test_engine(
                step_timeout_s=0.1, max_restarts=2, step_delay_s=0.001
            ) as engine:
                inject_fault(engine, "worker", at_step=2, stall_s=4.0)
                async with anyio.create_task_group() as tg:
                    for i in range(4):
                        tg.start_soon(one, engine, i)
        except EngineDeadError:
            pass
    assert len(ends) == 4
