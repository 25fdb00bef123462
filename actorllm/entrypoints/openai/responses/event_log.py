"""The events of a streamed background response, kept for every reader.

A response created with ``background`` and ``stream`` writes its events here as its run
produces them; the ``POST`` that created it and any later ``GET /v1/responses/{id}?stream=
true&starting_after=N`` read them: what is already written at once, then each new event,
until the run has ended. A reader that goes away (a closed connection) changes nothing
for the run or for other readers. An event's ``sequence_number`` is its index here.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

import anyio


class EventLog:
    """One run's events, appended by the run (one writer), read by any number of readers."""

    def __init__(self) -> None:
        self._events: list[dict[str, Any]] = []
        self._changed = anyio.Event()
        self.closed = False

    def __len__(self) -> int:
        return len(self._events)

    async def append(self, event: dict[str, Any]) -> None:
        """The run's next event (an ``Emit``: the run's stream writes through it)."""
        if self.closed:
            raise RuntimeError("the event log of an ended run takes no more events")
        self._events.append(event)
        self._wake()

    def close(self) -> None:
        """The run has ended: readers end once they have read every event."""
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def follow(self, starting_after: int | None = None) -> AsyncIterator[dict[str, Any]]:
        """Every event after sequence number ``starting_after`` (all of them for None),
        then each new one, until the log is closed."""
        index = 0 if starting_after is None else starting_after + 1
        while True:
            while index < len(self._events):
                yield self._events[index]
                index += 1
            if self.closed:
                return
            await self._changed.wait()


class EventLogs:
    """The logs of the last ``max_size`` streamed background responses, by response id
    (the responses store's bound: a log is read beside its stored response). A log whose
    run is still going is never dropped: the bound may be passed while more runs than it
    are going."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._logs: OrderedDict[str, EventLog] = OrderedDict()

    def open(self, response_id: str) -> EventLog:
        log = self._logs[response_id] = EventLog()
        excess = len(self._logs) - self.max_size
        for rid in [rid for rid, old in self._logs.items() if old.closed][: max(0, excess)]:
            del self._logs[rid]
        return log

    def get(self, response_id: str) -> EventLog | None:
        return self._logs.get(response_id)
