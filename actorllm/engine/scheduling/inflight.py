"""``InflightSteps``: the engine's one record of the steps handed to the executor and not yet
done, with the one cap on how many there may be (1, or 2 under async scheduling).

Owned by the scheduler's ``Admission`` (it outlives scheduler incarnations: after a crash,
the steps still recorded here are exactly the requests "in hand", charged with the crash).
The worker thread's launch pipeline never holds more than this cap, because the scheduler
launches no more.

    >>> steps = InflightSteps(cap=1)
    >>> steps.full, len(steps)
    (False, 0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

if TYPE_CHECKING:
    from actorllm.core.scheduler_output import SchedulerOutput


@final
class InflightSteps:
    """Steps handed to the executor and not yet done, in launch order; at most ``cap``.

    The one record of in-flight steps on the engine side (the worker thread has its own
    launch pipeline, which never holds more than this cap)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._steps: dict[int, SchedulerOutput] = {}  # {step_id: step}

    def __len__(self) -> int:
        return len(self._steps)

    @property
    def full(self) -> bool:
        return len(self._steps) >= self.cap

    def add(self, so: SchedulerOutput) -> None:
        assert not self.full, "the in-flight cap was not checked"
        self._steps[so.step_id] = so

    def get(self, step_id: int) -> SchedulerOutput | None:
        return self._steps.get(step_id)

    def pop(self, step_id: int) -> SchedulerOutput | None:
        return self._steps.pop(step_id, None)

    def drain(self) -> list[SchedulerOutput]:
        """Forget every step (their core is gone); returns them."""
        steps, self._steps = list(self._steps.values()), {}
        return steps
