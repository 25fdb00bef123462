"""Idle notification shared by one supervision tree.

Places where part of the tree may have *become* idle (an actor about to sleep on an empty
mailbox, a supervisor done with an event) call :meth:`Activity.poke`; ``wait_until`` re-checks
its predicate after each poke. Nothing on the message hot path pokes unless it is about to
sleep, so the cost is one attribute test.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio


class Activity:
    __slots__ = ("_waiters",)

    def __init__(self) -> None:
        self._waiters: list[anyio.Event] = []  # events of tasks blocked in wait_until

    def poke(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for event in waiters:
                event.set()

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Block until ``predicate()`` is true, re-checking after every poke."""
        while not predicate():
            event = anyio.Event()
            self._waiters.append(event)
            await event.wait()
