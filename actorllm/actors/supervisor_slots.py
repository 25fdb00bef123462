"""What a :class:`~actorllm.actors.supervisor.Supervisor`'s event loop works on: one
:class:`Slot` per child (its bookkeeping), and the events the loop handles one at a time
(:class:`ChildExit`, :class:`RestartDue`, :class:`StopAll`).

Events carry the slot's generation (or the pending restart's token) so the loop can tell
a stale one, from an incarnation since stopped or replaced, and ignore it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import anyio

if TYPE_CHECKING:
    from actorllm.actors.cell import ActorCell
    from actorllm.actors.policy import Backoff
    from actorllm.actors.supervisor import Supervisor

Node: TypeAlias = "ActorCell[Any] | Supervisor"


@dataclass(eq=False)
class Slot:
    """The supervisor's bookkeeping for one child."""

    node: Node
    generation: int = 0  # bumped at every start; events carry it
    done: anyio.Event | None = None  # set when the current incarnation's task ends
    stop_requested: bool = False  # the supervisor stopped it (its end is not a ChildExit)
    restart_token: int = 0  # the pending restart that owns this slot (see RestartDue)
    attempt: int = 0  # consecutive restarts, for backoff
    started_at: float = -math.inf

    def next_backoff(self, backoff: Backoff | None, now: float, rng: random.Random) -> float:
        """The delay before this child's next restart (0: at once); counts the attempt,
        and starts the count again once the child ran ``backoff.reset_after`` seconds."""
        if backoff is None:
            return 0.0
        if now - self.started_at >= backoff.reset_after:
            self.attempt = 0
        delay = backoff.delay(self.attempt, rng)
        self.attempt += 1
        return delay


@dataclass(frozen=True)
class ChildExit:
    """A child ended on its own (``exc`` None: normally)."""

    slot: Slot
    generation: int
    exc: BaseException | None


@dataclass(frozen=True)
class RestartDue:
    """A backoff timer fired: restart ``group`` if this restart still owns its slots."""

    group: tuple[Slot, ...]
    token: int
    cause: BaseException | None


@dataclass(frozen=True)
class StopAll:
    """Stop every child, in reverse order, and end the incarnation."""


LoopEvent = ChildExit | RestartDue | StopAll
