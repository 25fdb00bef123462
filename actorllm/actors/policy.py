"""Restart policy as plain functions and small objects (no I/O, no clock of their own).

* :class:`RestartIntensity` — Erlang's "more than N restarts within T seconds" window.
* :func:`restart_group` — which children a strategy restarts when one must be restarted.
* :class:`Backoff` — exponential restart delays with jitter, reset after a quiet period.

The supervisor feeds these the current time; tests drive them with plain numbers.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from actorllm.actors.spec import Strategy

T = TypeVar("T")


class RestartIntensity:
    """Counts restarts in a sliding window of ``within`` seconds."""

    def __init__(self, max_restarts: int, within: float) -> None:
        self.max_restarts = max_restarts
        self.within = within
        self._times: deque[float] = deque()  # restart times inside the window, oldest first

    def record(self, now: float) -> bool:
        """Record one restart at ``now``; True if that makes more than ``max_restarts``."""
        self._times.append(now)
        while self._times and self._times[0] <= now - self.within:
            self._times.popleft()
        return len(self._times) > self.max_restarts

    def reset(self) -> None:
        self._times.clear()

    def __len__(self) -> int:
        return len(self._times)


def restart_group(strategy: Strategy, children: Sequence[T], failed: T) -> list[T]:
    """The children to restart, in start order, when ``failed`` must be restarted."""
    from actorllm.actors.spec import Strategy

    if strategy is Strategy.ONE_FOR_ONE:
        return [failed]
    if strategy is Strategy.ONE_FOR_ALL:
        return list(children)
    index = list(children).index(failed)
    return list(children[index:])


@dataclass(frozen=True)
class Backoff:
    """Delay before the ``attempt``-th consecutive restart of a child (0-based).

    ``delay = min(maximum, initial * multiplier**attempt) * (1 ± jitter)``. The attempt
    count goes back to 0 once a child has run ``reset_after`` seconds without ending.
    """

    initial: float = 0.1
    maximum: float = 10.0
    multiplier: float = 2.0
    jitter: float = 0.1  # a fraction of the delay, drawn uniformly in [-jitter, +jitter]
    reset_after: float = 30.0

    def __post_init__(self) -> None:
        if self.initial < 0 or self.maximum < self.initial or self.multiplier < 1:
            raise ValueError("need 0 <= initial <= maximum and multiplier >= 1")
        if not 0 <= self.jitter < 1 or self.reset_after < 0:
            raise ValueError("need 0 <= jitter < 1 and reset_after >= 0")

    def delay(self, attempt: int, rng: random.Random) -> float:
        base = min(self.maximum, self.initial * self.multiplier ** min(attempt, 64))
        if self.jitter:
            base *= 1 + rng.uniform(-self.jitter, self.jitter)
        return max(0.0, base)
