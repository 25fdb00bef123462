"""Fault injection: no request is lost when an actor dies (docs/architecture.md §3)."""

import anyio
import pytest

from actorllm.core.sampling_params import SamplingParams
from actorllm.engine import EngineDeadError, RequestFailedError
from actorllm.testing.engine_harness import (
    check_invariants,
    engine_context,
    inject_fault,
    open_test_engine,
)

pytestmark = pytest.mark.anyio

N_REQUESTS = 32
ENGINE = {"step_delay_s": 0.001, "max_num_seqs": 16, "max_num_batched_tokens": 64, "block_size": 8}


def prompt(i: int) -> str:
    return f"request {i} says " + "hello " * (i % 4)


def params(i: int) -> SamplingParams:
    # Mixed lengths and kinds; seeded random rows must replay exactly too.
    return SamplingParams(max_tokens=10 + i % 7, temperature=0.0 if i % 2 else 0.8, seed=i)


async def run_batch(engine) -> dict[int, tuple[list[int], str, str | None]]:
    results: dict[int, tuple[list[int], str, str | None]] = {}

    async def one(i: int) -> None:
        last = None
        async for out in engine.generate(prompt(i), params(i), request_id=f"r{i}"):
            last = out
        assert last is not None
        c = last.outputs[0]
        results[i] = (c.token_ids, c.text, c.finish_reason)

    async with anyio.create_task_group() as tg:
        for i in range(N_REQUESTS):
            tg.start_soon(one, i)
    return results


@pytest.fixture(scope="module")
def reference() -> dict[int, tuple[list[int], str, str | None]]:
    async def main():
        async with open_test_engine(**ENGINE) as engine:
            return await run_batch(engine)

    return anyio.run(main, backend="trio")


# (actor, where): early, mid-run and late crashes of each of the five actors, and of the
# model step itself (which crashes the executor).
FAULTS = [
    ("router", {"at_message": 1}),
    ("router", {"at_message": 17}),
    ("input_processor", {"at_message": 2}),
    ("input_processor", {"at_message": 30}),
    ("scheduler", {"at_step": 1}),
    ("scheduler", {"at_step": 8}),
    ("scheduler", {"at_step": 20}),
    ("executor", {"at_step": 2}),
    ("executor", {"at_step": 12}),
    ("output_processor", {"at_step": 1}),
    ("output_processor", {"at_step": 10}),
    ("output_processor", {"at_step": 25}),
    ("worker", {"at_step": 5}),
]


@pytest.mark.parametrize(
    ("actor", "where"), FAULTS, ids=[f"{a}-{next(iter(w.values()))}" for a, w in FAULTS]
)
async def test_a_crash_loses_nothing_and_changes_nothing(actor, where, reference):
    async with open_test_engine(**ENGINE) as engine:
        inject_fault(engine, actor, **where)
        results = await run_batch(engine)
        restarts = engine._actor_stat("restarts")
        await check_invariants(engine)
    crashed = "executor" if actor == "worker" else actor
    assert restarts[crashed] >= 1, f"the fault in {actor} never fired"
    assert results == reference


async def test_a_poison_request_is_failed_alone():
    async with open_test_engine(**ENGINE) as engine:
        ctx = engine_context(engine)

        def has_poison(so) -> bool:
            return "r7" in so.num_scheduled_tokens

        inject_fault(engine, "worker", when=has_poison, times=100)
        outcomes: dict[int, object] = {}

        async def one(i: int) -> None:
            try:
                async for out in engine.generate(prompt(i), params(i), request_id=f"r{i}"):
                    outcomes[i] = out
            except RequestFailedError as exc:
                outcomes[i] = exc

        async with anyio.create_task_group() as tg:
            for i in range(12):
                tg.start_soon(one, i)
        assert isinstance(outcomes[7], RequestFailedError)
        assert "poison" in str(outcomes[7])
        assert all(outcomes[i].finished for i in range(12) if i != 7)
        assert ctx.ledger.statistics().open_requests == 0
        await check_invariants(engine)


async def test_exceeding_restart_intensity_kills_the_engine_and_fails_every_request():
    """Callers outside the engine's scope (like HTTP handlers) see EngineDeadError; the
    engine's own ``async with`` raises it."""
    failures: list[BaseException] = []
    died: list[BaseException] = []
    ready = anyio.Event()
    holder = {}

    async def run_engine() -> None:
        try:
            async with open_test_engine(step_delay_s=0.002, max_restarts=1) as engine:
                holder["engine"] = engine
                ready.set()
                await anyio.sleep_forever()
        except EngineDeadError as exc:
            died.append(exc)

    async def one(i: int) -> None:
        try:
            async for _ in holder["engine"].generate(f"doomed {i}", SamplingParams(max_tokens=5)):
                pass
        except Exception as exc:
            failures.append(exc)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_engine)
            await ready.wait()
            inject_fault(holder["engine"], "worker", times=10_000)
            for i in range(16):
                tg.start_soon(one, i)
    assert died and holder["engine"].is_dead
    assert len(failures) == 16
    assert all(isinstance(f, EngineDeadError | RequestFailedError) for f in failures)
    assert any(isinstance(f, EngineDeadError) for f in failures)
    with pytest.raises(EngineDeadError):
        await collect_one(holder["engine"])


async def collect_one(engine) -> None:
    async for _ in engine.generate("after death", SamplingParams(max_tokens=1)):
        pass


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_restart_backoff_runs_in_virtual_time_under_mock_clock(anyio_backend):
    """The engine on trio's MockClock: a 30 s restart backoff costs no real time."""
    import time

    import trio.testing

    clock = trio.testing.MockClock(autojump_threshold=0.02)  # jump once idle for 20 ms
    start = clock.current_time()
    real = time.perf_counter()

    # A nested trio run with the mock clock; the outer test only hosts it.
    def run() -> list[int]:
        async def main() -> list[int]:
            async with open_test_engine(restart_backoff_s=30.0) as engine:
                inject_fault(engine, "scheduler", at_step=2)
                last = None
                async for out in engine.generate("backoff", SamplingParams(max_tokens=6)):
                    last = out
                return last.outputs[0].token_ids

        return trio.run(main, clock=clock)

    tokens = await anyio.to_thread.run_sync(run)
    assert len(tokens) == 6
    assert clock.current_time() - start >= 30.0 * 0.9  # the backoff happened, virtually
    assert time.perf_counter() - real < 20.0
