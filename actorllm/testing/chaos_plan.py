"""Where a chaos soak crashes the engine: scripted points or seeded random ones.

Theory of operation: every crash is one :class:`Trigger` armed through the public
``inject_fault(engine, actor, when=trigger)``. The trigger counts the messages ``actor``
takes from the moment it is armed and returns True at its ``at_message``-th one, which
makes ``inject_fault`` raise there — a real crash through the runtime, exactly where a bug
would be. It fires at most once; a trigger whose count is not reached in its batch stays
armed into the next ones, so crashes can pile up as they do in real incidents.

:class:`ChaosPlanner` decides the points. Scripted: a list of :class:`CrashPoint`, each
armed at the start of its batch. Random (seeded): ``crashes_per_batch`` points per batch,
the actor drawn from ``actors``, the message drawn uniformly from 1 to the number of
messages that actor took in a fault-free run of the batch (measured with counting
triggers that never fire), so most crashes land while requests are in flight; a fraction
``hangs`` of the points hang instead of raising.

    planner = ChaosPlanner.random(crashes=100, actors=ACTOR_NAMES, seed=0)
    for point in planner.points_for(batch, traffic):
        ...
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, final

# The engine actors a soak can crash; "worker" is the model step (it crashes the executor).
ACTOR_NAMES = ("router", "input_processor", "scheduler", "executor", "output_processor", "worker")


@dataclass(frozen=True)
class CrashPoint:
    """Crash ``actor`` at the ``at_message``-th message it takes once armed at the start
    of batch ``batch`` (0-based). ``hang``: hang there instead of raising (an actor holds
    the message for good, the model step stalls), for the watchdog or the step timeout to
    turn into a restart."""

    actor: str
    at_message: int = 1
    batch: int = 0
    hang: bool = False

    def __post_init__(self) -> None:
        if self.actor not in ACTOR_NAMES:
            raise ValueError(f"unknown actor {self.actor!r}; expected one of {ACTOR_NAMES}")
        if self.at_message < 1 or self.batch < 0:
            raise ValueError("at_message must be >= 1 and batch >= 0")


@final
class Trigger:
    """``when=`` predicate for ``inject_fault``: True at the point's message, once.

    ``fire=False`` makes a counting probe that never fires (traffic measurement).
    """

    def __init__(self, point: CrashPoint, *, fire: bool = True) -> None:
        self.point = point
        self.fire = fire
        self.seen = 0  # messages taken by the actor since arming
        self.fired_in_batch: int | None = None  # the batch it fired in, once it has
        self.batch = point.batch  # the batch now running (the soak updates it)

    def __call__(self, msg: Any) -> bool:
        self.seen += 1
        if not self.fire or self.fired_in_batch is not None or self.seen < self.point.at_message:
            return False
        self.fired_in_batch = self.batch
        return True

    @property
    def fired(self) -> bool:
        return self.fired_in_batch is not None


@dataclass
class ChaosPlanner:
    """The crash points of a soak, batch by batch (see the module docstring)."""

    crashes: int
    actors: Sequence[str] = ACTOR_NAMES
    seed: int = 0
    crashes_per_batch: int = 1
    hangs: float = 0.0  # the fraction of random points that hang instead of raising
    scripted: Sequence[CrashPoint] | None = None
    planned: int = 0  # points handed out so far
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        unknown = [a for a in self.actors if a not in ACTOR_NAMES]
        if unknown or not self.actors:
            raise ValueError(f"actors must be a non-empty subset of {ACTOR_NAMES}: {unknown}")
        if self.crashes < 0 or self.crashes_per_batch < 1 or not 0 <= self.hangs <= 1:
            raise ValueError("need crashes >= 0, crashes_per_batch >= 1, 0 <= hangs <= 1")
        if self.scripted is not None:
            self.crashes = len(self.scripted)
        self._rng = random.Random(self.seed)

    @classmethod
    def random(
        cls,
        crashes: int,
        actors: Sequence[str] = ACTOR_NAMES,
        seed: int = 0,
        per_batch: int = 1,
        hangs: float = 0.0,
    ) -> ChaosPlanner:
        return cls(
            crashes=crashes,
            actors=tuple(actors),
            seed=seed,
            crashes_per_batch=per_batch,
            hangs=hangs,
        )

    @classmethod
    def script(cls, points: Sequence[CrashPoint]) -> ChaosPlanner:
        return cls(crashes=len(points), actors=ACTOR_NAMES, scripted=tuple(points))

    @property
    def exhausted(self) -> bool:
        return self.planned >= self.crashes

    def points_for(self, batch: int, traffic: Mapping[str, int]) -> list[CrashPoint]:
        """The points to arm at the start of ``batch``. ``traffic`` is {actor: messages it
        took in a fault-free run of this batch's workload}."""
        if self.scripted is not None:
            points = [p for p in self.scripted if p.batch == batch]
        else:
            n = min(self.crashes_per_batch, self.crashes - self.planned)
            points = []
            for _ in range(n):
                actor = self._rng.choice(list(self.actors))
                top = max(1, traffic.get(actor, 1))
                at, hang = self._rng.randint(1, top), self._rng.random() < self.hangs
                points.append(CrashPoint(actor, at, batch, hang))
        self.planned += len(points)
        return points
