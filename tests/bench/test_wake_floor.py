"""bench/wake_floor.py: one step wakes every parked task exactly once, on both loops."""

from __future__ import annotations

import pytest

from actorllm.bench import wake_floor


@pytest.mark.anyio
async def test_wake_floor_wakes_every_task_once_per_step(anyio_backend: str) -> None:
    result = await wake_floor.wake_floor_ms(16, 5)
    assert result["steps"] == 5
    assert result["step_ms"] > 0
    assert result["us_per_task"] == pytest.approx(result["step_ms"] * 1e3 / 16)


@pytest.mark.anyio
async def test_each_step_runs_each_reader_once(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Count the readers' wake-ups through the primitive each backend uses: a step that
    # returned before every reader ran (or ran one twice) would time the wrong thing.
    seen: list[int] = []
    steps = 3
    n = 7
    if anyio_backend == "trio":
        import trio

        real = trio.lowlevel.reschedule

        def counting(task: object, *args: object) -> None:
            seen.append(1)
            real(task, *args)  # type: ignore[arg-type]

        monkeypatch.setattr(trio.lowlevel, "reschedule", counting)
        await wake_floor.wake_floor_ms(n, steps)
        # n readers and the driver, once each per step
        assert len(seen) == (n + 1) * (steps + wake_floor.WARMUP_STEPS)
    else:
        import asyncio

        futures: list[object] = []
        loop = asyncio.get_running_loop()
        real_create = loop.create_future

        def create() -> asyncio.Future[object]:
            fut = real_create()
            futures.append(fut)
            return fut

        monkeypatch.setattr(loop, "create_future", create)
        await wake_floor.wake_floor_ms(n, steps)
        total = steps + wake_floor.WARMUP_STEPS
        # one future per reader wait (the last one is never set) and, for the driver,
        # the first one plus one per step
        assert len(futures) == n * (total + 1) + 1 + total


@pytest.mark.anyio
async def test_the_collector_is_off_while_timed_and_restored_after(
    anyio_backend: str,
) -> None:
    import gc

    seen: list[bool] = []

    async def steps(n: int, count: int) -> list[float]:
        seen.append(gc.isenabled())
        return [0.001] * count

    before = gc.isenabled()
    step_s = await wake_floor.median_step_s(4, 3, steps, steps)
    assert seen == [False] and gc.isenabled() == before and step_s == 0.001
