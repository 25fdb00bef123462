"""Scheduling policies: the order of the waiting queue and whom to preempt.

* ``fcfs``: waiting requests are served by ``arrival_time`` (a request added late with an
  earlier arrival time, as ``LLMEngine.add_request(arrival_time=...)`` allows, goes ahead
  of later arrivals; equal times keep insertion order); a preempted request goes back to
  the front. When blocks run out, the newest running request (the last admitted) is
  preempted, as in vLLM.
* ``priority``: waiting requests are served by ``(priority, arrival_time)``, lower first; a
  preempted request re-enters at its own place, ahead of later arrivals of its priority.
  The victim is the running request with the largest ``(priority, arrival_time)``; a
  waiting request may also preempt running requests of strictly lower priority (a larger
  value) to get blocks or a seat.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Protocol

from actorllm.core.request import Request
from actorllm.core.scheduler.config import Policy


class WaitingQueue(Protocol):
    """Requests not running, in the order the policy serves them."""

    def add(self, request: Request) -> None: ...
    def prepend(self, request: Request) -> None: ...
    def pop(self) -> Request: ...
    def remove(self, request: Request) -> None: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Request]: ...


class FCFSQueue:
    """Arrival order; ``prepend`` puts a request back at the front."""

    def __init__(self) -> None:
        self._q: deque[Request] = deque()

    def add(self, request: Request) -> None:
        # Usually the newest arrival: an append. Else it goes after the last request that
        # arrived no later than it (O(distance) from the back).
        place = len(self._q)
        while place and self._q[place - 1].arrival_time > request.arrival_time:
            place -= 1
        self._q.insert(place, request)

    def prepend(self, request: Request) -> None:
        self._q.appendleft(request)

    def pop(self) -> Request:
        return self._q.popleft()

    def remove(self, request: Request) -> None:
        self._q.remove(request)  # O(n): only aborts and rare stops of preempted requests

    def __len__(self) -> int:
        return len(self._q)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._q)


class PriorityQueue:
    """Ordered by ``(priority, arrival_time)``, ties by insertion; ``prepend`` == ``add``."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, Request]] = []
        self._counter = itertools.count()

    def add(self, request: Request) -> None:
        heapq.heappush(
            self._heap, (request.priority, request.arrival_time, next(self._counter), request)
        )

    prepend = add

    def pop(self) -> Request:
        return heapq.heappop(self._heap)[3]

    def remove(self, request: Request) -> None:
        self._heap = [e for e in self._heap if e[3] is not request]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Request]:
        return (e[3] for e in sorted(self._heap, key=lambda e: e[:3]))


def make_waiting_queue(policy: Policy) -> WaitingQueue:
    return PriorityQueue() if policy == "priority" else FCFSQueue()


def _rank(r: Request) -> tuple[int, float]:
    return (r.priority, r.arrival_time)


def pick_victim(running: list[Request], policy: Policy) -> Request:
    """The running request to preempt when blocks run out (``running`` is non-empty)."""
    if policy == "priority":
        return max(running, key=_rank)
    return running[-1]


def pick_victim_for(waiting: Request, running: Iterable[Request], policy: Policy) -> Request | None:
    """A running request ``waiting`` may preempt (priority policy only), or None."""
    if policy != "priority":
        return None
    lower = [r for r in running if r.priority > waiting.priority]
    return max(lower, key=_rank) if lower else None
