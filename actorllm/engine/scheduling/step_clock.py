"""``StepClock``: the step timeout, a deadline on the model step the worker is running.

Theory of operation: the worker thread runs steps one after another, so a step is timed
from the moment the thread *starts* it (:meth:`StepClock.started`, posted by the thread),
not from when it was queued: a step waiting behind a slow one is not late. A task of the
executor's incarnation (:meth:`StepClock.run`) raises :class:`StepTimeout` when the step
running has been at it for ``timeout_s``: the executor crashes, the core restarts and its
requests are recomputed, exactly as for a step that raised.

The stuck step keeps the thread after that restart. The new incarnation queues a reset job
behind it and waits (:meth:`StepClock.waiting_for_thread`) up to ``recovery_s`` for the
thread to come back (:meth:`StepClock.thread_ready`): a stall that ends in time costs one
restart, while a thread hung for good crashes each incarnation until the restart intensity
stops the engine, so every caller gets an error instead of waiting forever.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import final

import anyio


class StepTimeout(RuntimeError):
    """A model step ran longer than ``EngineConfig.step_timeout_s`` (or the worker thread
    stayed stuck in one after a restart)."""


@final
class StepClock:
    def __init__(self, timeout_s: float, recovery_s: float) -> None:
        self.timeout_s = timeout_s
        self.recovery_s = recovery_s
        self._running: OrderedDict[int, float] = OrderedDict()  # {step_id: started at}
        self._starting: list[int] = []  # started, not yet stamped by run()
        self._ready_by: float | None = None  # deadline for the thread to come back, if waiting
        self._wake = anyio.Event()  # set when a deadline may have moved

    def waiting_for_thread(self) -> None:
        self._ready_by = anyio.current_time() + self.recovery_s
        self._wake.set()

    def thread_ready(self) -> None:
        self._ready_by = None
        self._wake.set()

    def started(self, step_id: int) -> None:
        """Posted by the worker thread as it starts the step. Runs as a bare loop callback
        (no task, so no anyio clock here on asyncio): ``run`` stamps the time."""
        self._starting.append(step_id)
        self._wake.set()

    def done(self, step_id: int) -> None:
        if step_id in self._starting:
            self._starting.remove(step_id)
        self._running.pop(step_id, None)

    def _due(self) -> float | None:
        deadlines = [t + self.timeout_s for t in list(self._running.values())[:1]]
        if self._ready_by is not None:
            deadlines.append(self._ready_by)
        return min(deadlines, default=None)

    async def run(self) -> None:
        """Watch until cancelled; raises :class:`StepTimeout` past a deadline."""
        while True:
            self._wake = anyio.Event()
            now = anyio.current_time()
            for step_id in self._starting:
                self._running[step_id] = now
            self._starting.clear()
            due = self._due()
            with anyio.CancelScope(deadline=due if due is not None else float("inf")):
                await self._wake.wait()
            now = anyio.current_time()
            if self._ready_by is not None and now >= self._ready_by:
                raise StepTimeout(
                    f"the worker thread is still stuck in a step after {self.recovery_s:g}s"
                )
            if self._running:
                step_id, started = next(iter(self._running.items()))
                if now >= started + self.timeout_s:
                    raise StepTimeout(
                        f"model step {step_id} did not finish within {self.timeout_s:g}s "
                        "(step_timeout_s); restarting the core"
                    )
