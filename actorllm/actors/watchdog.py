"""The per-message watchdog: restart an actor whose handler never returns.

Theory of operation: one :class:`Watchdog` runs as a background task of each incarnation
of a child whose ``ChildSpec.message_deadline`` is set. The cell tells it when a message
is taken (:meth:`Watchdog.taken`) and finished (:meth:`Watchdog.finished`), which costs
two attribute writes on the hot path. The task sleeps on an event while the actor holds
nothing; while it holds a message it sleeps until that message's deadline and, if the
very same message (same sequence number) is still in hand, raises :class:`ActorHung`.
Raised in the incarnation's task group, that cancels the stuck handler and is the actor's
crash: the supervisor restarts it and the held message becomes a dead letter.

A busy actor costs the watchdog one wake-up per deadline period, not one per message.
"""

from __future__ import annotations

from typing import final

import anyio

from actorllm.actors.errors import ActorHung


@final
class Watchdog:
    def __init__(self, name: str, deadline: float) -> None:
        self.name = name
        self.deadline = deadline
        self._seq = 0  # messages taken so far; tells a new message from the old one
        self._held: object = None  # the message in hand (valid while _holding)
        self._holding = False
        self._taken_at = 0.0  # when the message in hand was taken (anyio clock)
        self._wake: anyio.Event | None = None  # set when a message is taken, if waited on

    def taken(self, msg: object) -> None:
        self._seq += 1
        self._held, self._holding = msg, True
        self._taken_at = anyio.current_time()
        if self._wake is not None:
            self._wake.set()
            self._wake = None

    def finished(self) -> None:
        self._held, self._holding = None, False

    async def run(self) -> None:
        """Watch until cancelled; raises :class:`ActorHung` on a message held too long."""
        while True:
            if not self._holding:
                self._wake = anyio.Event()
                await self._wake.wait()
                continue
            seq = self._seq
            await anyio.sleep_until(self._taken_at + self.deadline)
            if self._holding and self._seq == seq:
                raise ActorHung(self.name, self.deadline, self._held)
