"""``StepClock``: the step timeout, a deadline on the model step the worker is running.

Theory of operation: the executor tells the clock when it hands a step to the worker
thread (:meth:`StepClock.submitted`) and when the step's outcome comes back
(:meth:`StepClock.done`). Steps run one after another on the thread, so the oldest
outstanding step is the one running, and it started when it was submitted or when the
step before it came back, whichever is later. :meth:`StepClock.run` (a task of the
executor's incarnation) sleeps until that step's deadline and raises
:class:`StepTimeout` if it is still outstanding: the executor crashes, the core restarts
and its requests are recomputed, exactly as for a step that raised. A step that is late
only because the thread is still stuck in an older one (after a restart) times out too, so
a thread hung for good ends in the restart intensity (the engine dies: every caller gets
``EngineDeadError``) rather than in callers waiting forever.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import final

import anyio


class StepTimeout(RuntimeError):
    """A model step was not done within ``EngineConfig.step_timeout_s``."""


@final
class StepClock:
    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._outstanding: OrderedDict[int, float] = OrderedDict()  # {step_id: submitted at}
        self._last_done = -float("inf")  # when the latest step came back
        self._wake: anyio.Event | None = None  # set on submit, if the clock waits for one

    def submitted(self, step_id: int) -> None:
        self._outstanding[step_id] = anyio.current_time()
        if self._wake is not None:
            self._wake.set()
            self._wake = None

    def done(self, step_id: int) -> None:
        if self._outstanding.pop(step_id, None) is not None:
            self._last_done = anyio.current_time()

    async def run(self) -> None:
        """Watch until cancelled; raises :class:`StepTimeout` on a step past its deadline."""
        while True:
            if not self._outstanding:
                self._wake = anyio.Event()
                await self._wake.wait()
                continue
            step_id, submitted = next(iter(self._outstanding.items()))
            await anyio.sleep_until(max(submitted, self._last_done) + self.timeout_s)
            if next(iter(self._outstanding), None) == step_id:  # still the one running
                raise StepTimeout(
                    f"model step {step_id} did not finish within {self.timeout_s:g}s "
                    "(step_timeout_s); restarting the core"
                )
