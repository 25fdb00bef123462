"""The floor under a streamed step with vLLM's API: one ``RequestOutput`` per caller per step.

:mod:`actorllm.bench.wake_floor` times waking ``n`` parked tasks and nothing else. A
DELTA caller of ``AsyncEngine.generate`` (vLLM's ``AsyncLLM.generate``) gets more than a
wake-up each step: a ``RequestOutput`` (with its ``CompletionOutput``, token list and
``RequestMetrics``) built for it, handed over through a queue, and read through the async
generator ``generate`` returns. This times exactly that, with nothing of the engine (no
scheduler, detokenizer, ledger or actor):

* the driver, per step: for each of ``n`` callers, builds the output of one new token,
  appends it to the caller's queue and wakes the caller if it is parked;
* each caller: ``async for out in reads(...)``, where ``reads`` is an async generator of
  ``generate``'s shape (park while the queue is empty, pop, yield, end after the finished
  output), so a caller runs the same three frames as one of ``generate``: its loop, the
  generator, the wait.

``bench overhead`` adds it to the core loop's step: ``(core + output floor) / core`` is
the least engine/core ratio that any engine serving this API with a task per caller can
show on that event loop, whatever it does between the scheduler and the callers.

    >>> import anyio
    >>> anyio.run(output_floor_ms, 4, 20)["steps"]  # doctest: +SKIP
    20
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from actorllm.bench.overhead import PROMPT_LEN
from actorllm.bench.wake_floor import median_step_s, timed_steps
from actorllm.core.outputs import CompletionOutput, RequestMetrics, RequestOutput


async def output_floor_ms(n: int, steps: int) -> dict[str, Any]:
    """Median wall time of one step that hands each of ``n`` callers one output (ms), and
    per caller (us); must run inside an event loop (trio or asyncio)."""
    step_s = await median_step_s(n, steps, _trio_steps, _asyncio_steps)
    return {"steps": steps, "step_ms": step_s * 1e3, "us_per_caller": step_s / n * 1e6}


def make_output(
    request_id: str, prompt: list[int], token_id: int, now: float, text: str = " x"
) -> RequestOutput:
    """What the engine hands a DELTA caller for one new token (the output processor's plain
    lane builds these same objects)."""
    return RequestOutput(
        request_id=request_id,
        prompt=None,
        prompt_token_ids=prompt,
        prompt_logprobs=None,
        outputs=[CompletionOutput(index=0, text=text, token_ids=[token_id])],
        finished=False,
        num_cached_tokens=0,
        metrics=RequestMetrics(
            arrival_time=0.0, first_scheduled_time=0.0, first_token_time=0.0, last_token_time=now
        ),
    )


async def reads(
    queue: deque[RequestOutput], wait: Callable[[], Awaitable[object]]
) -> AsyncIterator[RequestOutput]:
    """``generate``'s shape: park (``wait``) while nothing is queued, yield each output,
    end after the finished one."""
    while True:
        if not queue:
            await wait()
        item = queue.popleft()
        yield item
        if item.finished:
            return


class _Callers:
    """``n`` callers' queues and parked waiters, and the count of outputs read this step."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.ids = [f"r{i}" for i in range(n)]
        self.prompt = list(range(3, 3 + PROMPT_LEN))
        self.queues: list[deque[RequestOutput]] = [deque() for _ in range(n)]
        self.parked: list[Any] = [None] * n  # a trio Task or an asyncio Future, or None
        self.read = 0
        self.step = 0

    def hand_out(self, wake: Callable[[Any], object]) -> None:
        """One step: an output on every queue, every parked caller woken."""
        self.read = 0
        self.step += 1
        now = time.monotonic()
        parked, queues, ids, prompt = self.parked, self.queues, self.ids, self.prompt
        for i in range(self.n):
            queues[i].append(make_output(ids[i], prompt, self.step, now))
            waiter = parked[i]
            if waiter is not None:
                parked[i] = None
                wake(waiter)


async def _trio_steps(n: int, steps: int) -> list[float]:
    import trio
    import trio.testing

    callers = _Callers(n)
    driver = trio.lowlevel.current_task()

    def abort(_: Any) -> trio.lowlevel.Abort:
        return trio.lowlevel.Abort.SUCCEEDED

    async def caller(i: int) -> None:
        async def wait() -> None:
            callers.parked[i] = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(abort)

        async for _ in reads(callers.queues[i], wait):
            callers.read += 1
            if callers.read == n:
                trio.lowlevel.reschedule(driver)

    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(caller, i)
        await trio.testing.wait_all_tasks_blocked()  # every caller parked

        async def wait_done() -> None:
            await trio.lowlevel.wait_task_rescheduled(abort)

        times = await timed_steps(
            steps, lambda: callers.hand_out(trio.lowlevel.reschedule), wait_done
        )
        nursery.cancel_scope.cancel()
    return times


async def _asyncio_steps(n: int, steps: int) -> list[float]:
    loop = asyncio.get_running_loop()
    callers = _Callers(n)
    done: asyncio.Future[None] = loop.create_future()

    async def caller(i: int) -> None:
        async def wait() -> None:
            future: asyncio.Future[None] = loop.create_future()
            callers.parked[i] = future
            await future

        async for _ in reads(callers.queues[i], wait):
            callers.read += 1
            if callers.read == n:
                done.set_result(None)

    def hand_out() -> None:
        nonlocal done
        done = loop.create_future()
        callers.hand_out(lambda future: future.set_result(None))

    tasks = [asyncio.ensure_future(caller(i)) for i in range(n)]
    try:
        await asyncio.sleep(0)  # one pass of the loop: every caller ran to its wait
        assert all(p is not None for p in callers.parked)
        return await timed_steps(steps, hand_out, lambda: done)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
