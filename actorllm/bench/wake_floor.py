"""The event loop's floor under a streamed step: waking one parked task per stream.

A DELTA request's caller is a task reading its stream (``async for out in
engine.generate(...)``, or the HTTP handler writing the SSE events); each step hands it
one output, so each step wakes every caller once: the loop runs one task step per
stream. This measures that cost alone, with the event loop's own lowest-level
primitives and nothing of the engine: ``n`` tasks park, a driver wakes all of them, each
takes its item, counts itself and parks again; the last one wakes the driver.

* trio: ``trio.lowlevel.wait_task_rescheduled`` / ``reschedule`` (what
  ``RequestStream`` uses);
* asyncio: one future per wait (``loop.create_future()`` / ``set_result``).

``bench overhead`` adds it to the core loop's step: ``(core + wake floor) / core`` is the
least engine/core ratio any engine that gives every DELTA caller its own task can show on
that event loop, before it has built a single output.

    >>> import anyio
    >>> anyio.run(wake_floor_ms, 4, 20)["steps"]  # doctest: +SKIP
    20
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import sniffio

WARMUP_STEPS = 20


async def wake_floor_ms(n: int, steps: int) -> dict[str, Any]:
    """Median wall time of one step that wakes ``n`` parked tasks once (ms), and per task
    (us); must run inside an event loop (trio or asyncio)."""
    step_s = await median_step_s(n, steps, _trio_steps, _asyncio_steps)
    return {"steps": steps, "step_ms": step_s * 1e3, "us_per_task": step_s / n * 1e6}


StepsFn = Callable[[int, int], Awaitable[list[float]]]  # (n, steps) -> each step's seconds


async def median_step_s(n: int, steps: int, on_trio: StepsFn, on_asyncio: StepsFn) -> float:
    """The median step (seconds) of ``steps`` timed after ``WARMUP_STEPS``, by the running
    loop's implementation, with the cyclic garbage collector off: a floor is the least
    any engine pays, and an engine pays for its collections on top (at 1024 callers the
    output floor's objects made CPython's default thresholds cost it ~30 %)."""
    run = on_trio if sniffio.current_async_library() == "trio" else on_asyncio
    enabled = gc.isenabled()
    gc.disable()
    try:
        times = await run(n, steps + WARMUP_STEPS)
    finally:
        if enabled:
            gc.enable()
    return statistics.median(times[WARMUP_STEPS:])


async def timed_steps(
    steps: int, wake_all: Callable[[], None], wait_done: Callable[[], Awaitable[object]]
) -> list[float]:
    """Each step's wall time: wake every parked reader, wait until the last one ran."""
    times: list[float] = []
    for _ in range(steps):
        t0 = time.perf_counter()
        wake_all()
        await wait_done()
        times.append(time.perf_counter() - t0)
    return times


async def _trio_steps(n: int, steps: int) -> list[float]:
    import trio
    import trio.testing

    parked: list[Any] = []
    woken = 0
    driver = trio.lowlevel.current_task()

    def abort(_: Any) -> trio.lowlevel.Abort:
        return trio.lowlevel.Abort.SUCCEEDED

    async def reader() -> None:
        nonlocal woken
        while True:
            parked.append(trio.lowlevel.current_task())
            await trio.lowlevel.wait_task_rescheduled(abort)
            woken += 1
            if woken == n:
                trio.lowlevel.reschedule(driver)

    def wake_all() -> None:
        nonlocal woken
        tasks = parked[:]
        parked.clear()
        woken = 0
        for task in tasks:
            trio.lowlevel.reschedule(task)

    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()  # every reader parked

        async def wait_done() -> None:
            await trio.lowlevel.wait_task_rescheduled(abort)

        times = await timed_steps(steps, wake_all, wait_done)
        nursery.cancel_scope.cancel()
    return times


async def _asyncio_steps(n: int, steps: int) -> list[float]:
    loop = asyncio.get_running_loop()
    waits: list[asyncio.Future[None]] = []
    woken = 0
    done: asyncio.Future[None] = loop.create_future()

    async def reader() -> None:
        nonlocal woken
        while True:
            fut: asyncio.Future[None] = loop.create_future()
            waits.append(fut)
            await fut
            woken += 1
            if woken == n:
                done.set_result(None)

    def wake_all() -> None:
        nonlocal woken, done
        futures = waits[:]
        waits.clear()
        woken = 0
        done = loop.create_future()
        for fut in futures:
            fut.set_result(None)

    readers = [asyncio.ensure_future(reader()) for _ in range(n)]
    try:
        await asyncio.sleep(0)  # one pass of the loop: every reader ran to its wait
        assert len(waits) == n
        return await timed_steps(steps, wake_all, lambda: done)
    finally:
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
