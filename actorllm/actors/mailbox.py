"""Bounded mailboxes, owned by supervisors and shared by every incarnation of a child.

Theory of operation: a mailbox is an anyio memory object stream of ``(message, reply)``
envelopes with a fixed capacity. Senders go through ``ActorRef``: ``send`` waits while the
mailbox is full (the backpressure), ``send_nowait`` raises :class:`MailboxFull`. The
receiving side never waits *inside* the stream: it takes with ``receive_nowait`` and, when
the mailbox is empty, sleeps on a wake-up event that senders set. That way waking a
receiver for a graceful stop never needs to cancel a ``receive()`` (a cancelled receive
can lose an item already handed to it on asyncio), and a crashed or stopped actor leaves
every queued message in place for its next incarnation.

A mailbox is closed only when its child is gone for good; the messages still queued are
then drained: their replies fail with ``ActorStopped`` and they go to the dead-letter hook.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar, final

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from actorllm.actors.errors import ActorStopped, MailboxFull
from actorllm.actors.reply import Reply

M = TypeVar("M")

Envelope = tuple[M, Reply[Any] | None]


class MailboxStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of one mailbox."""

    name: str
    capacity: int
    depth: int  # messages sent and not yet taken by the actor
    peak_depth: int  # highest depth seen since creation
    sent: int  # messages enqueued since creation
    taken: int  # messages the actor (any incarnation) took
    senders_waiting: int  # tasks blocked in send() on a full mailbox
    closed: bool


@final
class Mailbox(Generic[M]):
    """The queue of one supervised actor. Created by its supervisor; use it via ``ActorRef``."""

    __slots__ = (
        "_closed",
        "_front",
        "_recv",
        "_send",
        "_wakeup",
        "capacity",
        "name",
        "peak_depth",
        "sent",
        "taken",
    )

    def __init__(self, name: str, capacity: int) -> None:
        if not (isinstance(capacity, int) and capacity >= 1):
            raise ValueError(f"mailbox_size must be an int >= 1, got {capacity!r}")
        self.name = name
        self.capacity = capacity
        send, recv = anyio.create_memory_object_stream[Envelope[M]](capacity)
        self._send: MemoryObjectSendStream[Envelope[M]] = send
        self._recv: MemoryObjectReceiveStream[Envelope[M]] = recv
        self._closed = False
        self._wakeup: anyio.Event | None = None  # set by the receiver when it sleeps
        # Redelivered messages (see ``put_front``), taken before the stream's buffer.
        self._front: deque[Envelope[M]] = deque()
        self.sent = 0  # envelopes enqueued
        self.taken = 0  # envelopes handed to the actor
        self.peak_depth = 0

    @property
    def depth(self) -> int:
        return max(0, self.sent - self.taken)

    @property
    def closed(self) -> bool:
        return self._closed

    # -- sender side ---------------------------------------------------------------------

    async def put(self, msg: M, reply: Reply[Any] | None) -> None:
        """Enqueue, waiting while full. Raises ``ActorStopped`` if closed (also while waiting)."""
        try:
            await self._send.send((msg, reply))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            raise ActorStopped(self.name) from None
        self._after_put()

    def put_nowait(self, msg: M, reply: Reply[Any] | None) -> None:
        """Enqueue now or raise ``MailboxFull`` / ``ActorStopped``."""
        try:
            self._send.send_nowait((msg, reply))
        except anyio.WouldBlock:
            raise MailboxFull(self.name, self.capacity) from None
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            raise ActorStopped(self.name) from None
        self._after_put()

    def _after_put(self) -> None:
        self.sent += 1
        depth = self.sent - self.taken
        if depth > self.peak_depth:
            self.peak_depth = depth
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set()

    # -- receiver side (the actor cell) -------------------------------------------------------

    def put_front(self, msg: M) -> None:
        """Redeliver ``msg`` ahead of everything queued (a dead letter retried after a
        crash keeps its place in line). Never blocks; allowed past capacity, since the
        message was already counted once. Raises ``ActorStopped`` if closed."""
        if self._closed:
            raise ActorStopped(self.name)
        self._front.appendleft((msg, None))
        self._after_put()

    def take_nowait(self) -> Envelope[M] | None:
        """The next envelope, or None if empty. Not a checkpoint."""
        if self._front:
            self.taken += 1
            return self._front.popleft()
        try:
            envelope = self._recv.receive_nowait()
        except anyio.WouldBlock:
            return None
        self.taken += 1
        return envelope

    async def wait_nonempty(self) -> None:
        """Sleep until a sender enqueues or :meth:`wake` is called. Cancellation-safe."""
        event = self._wakeup = anyio.Event()
        try:
            await event.wait()
        finally:
            if self._wakeup is event:
                self._wakeup = None

    def wake(self) -> None:
        """Wake a receiver sleeping in :meth:`wait_nonempty` (for a stop request)."""
        if self._wakeup is not None:
            self._wakeup.set()
            self._wakeup = None

    def close(self, on_dropped: Callable[[M, Reply[Any] | None], None]) -> None:
        """Close for good: drain what is queued through ``on_dropped``, then refuse sends.

        Senders blocked on a full mailbox have their message drained too (it is moved into
        the buffer as room appears); later sends raise ``ActorStopped``.
        """
        if self._closed:
            return
        self._closed = True
        while (envelope := self.take_nowait()) is not None:
            on_dropped(*envelope)
        self._recv.close()
        self._send.close()
        self.wake()

    def statistics(self) -> MailboxStatistics:
        stats = self._send.statistics()
        return MailboxStatistics(
            name=self.name,
            capacity=self.capacity,
            depth=self.depth,
            peak_depth=self.peak_depth,
            sent=self.sent,
            taken=self.taken,
            senders_waiting=stats.tasks_waiting_send,
            closed=self._closed,
        )
