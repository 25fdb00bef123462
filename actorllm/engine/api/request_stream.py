"""``RequestStream``: one request's outputs, from the engine to its caller.

Theory of operation
-------------------
Every open request has one stream with exactly one writer (whichever actor delivers: the
output processor, or whoever ends the request) and one reader (the caller's task in
``AsyncEngine.generate``). At 1024 running requests the engine delivers 1024 outputs per
step, so this is the engine's hottest object: a general memory object stream (one
``anyio.Event`` per wait, a checkpoint and a statistics object per receive) cost several
microseconds per output. This one is a ``deque`` and at most one parked reader, woken with
the backend's own primitive (``trio.lowlevel.reschedule``, or an asyncio future), so a
delivery costs an append and, when the reader waits, one wake-up.

Contract (that of anyio's memory object streams, which it replaces here):

* ``send_nowait`` never blocks; it raises ``anyio.ClosedResourceError`` after the writer
  closed and ``anyio.BrokenResourceError`` once the reader went away.
* The reader's ``receive`` (and ``async for``) is a checkpoint; it blocks until an item or
  the end; after ``close()`` it yields the buffered items, then ends
  (``anyio.EndOfStream`` / end of iteration). Cancelling a blocked reader loses nothing.
* ``async with stream:`` on the reader's side closes the reader's end on exit.
* The buffer is unbounded; the ledger enforces the backlog bound (``deliver``).

Merging (``merge=``, the engine's DELTA and CUMULATIVE requests; vLLM's
``RequestOutputCollector``): an ``offer`` that finds one item unread may fold itself into
it instead of queueing (``merge(unread, new)`` returns the item that replaces both, or
None to queue ``new`` behind). A caller that falls behind the engine then wakes once for
several steps and reads one output that says what they said in turn; the backlog
(``len``) still counts every delivery not read.

A delivery that wakes a parked reader counts it in a :class:`WakeCount` the streams share
(the ledger's) until the reader runs again: the output processor, seeing woken readers
that have not run yet, lets them run before it delivers the next step, so outputs are
merged only for a reader that is busy elsewhere, never for one merely not scheduled yet.

The stream learns the backend the first time its reader waits; everything else is plain,
loop-thread-only Python (no locks).

    >>> import anyio
    >>> async def main() -> list[int]:
    ...     stream = RequestStream[int]()
    ...     stream.send_nowait(1)
    ...     stream.close()
    ...     return [x async for x in stream]
    >>> anyio.run(main)
    [1]
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Any, Generic, TypeVar, final

import anyio
import msgspec
import sniffio
import trio

T = TypeVar("T")

_reschedule = trio.lowlevel.reschedule
_current_task = trio.lowlevel.current_task
_wait_task_rescheduled = trio.lowlevel.wait_task_rescheduled


@final
class WakeCount:
    """Over a group of streams (the ledger's): ``pending``, the readers a delivery woke that
    have not run since, and ``unread``, the streams holding a delivery their reader has not
    taken (a reader busy in its own work, writing the previous output to its socket, say).
    The output processor gives both a few turns of the loop before it delivers again."""

    __slots__ = ("pending", "unread")

    def __init__(self) -> None:
        self.pending = 0
        self.unread = 0


class RequestStreamStatistics(msgspec.Struct, frozen=True, kw_only=True):
    current_buffer_used: int  # items delivered, not read yet
    max_buffer_size: float  # always math.inf: the ledger bounds the backlog
    reader_waiting: bool
    closed: bool  # the writer ended the stream
    merged: int  # deliveries folded into an unread one, over the stream's life


@final
class RequestStream(Generic[T]):
    """One writer (``send_nowait``, ``close``), one reader (``receive``, ``async for``)."""

    __slots__ = (
        "_closed",
        "_folded",
        "_items",
        "_loop",
        "_merge",
        "_merged",
        "_reader_gone",
        "_trio",
        "_waiter",
        "_wakes",
        "_woken",
    )

    def __init__(
        self, merge: Callable[[T, T], T | None] | None = None, wakes: WakeCount | None = None
    ) -> None:
        self._items: deque[T] = deque()  # delivered, not read yet
        # Folds an offered item into the one unread item, or says it cannot (None).
        self._merge = merge
        self._folded = 0  # deliveries folded into _items[0] (only ever a lone item)
        self._merged = 0  # deliveries ever folded (the reader was behind for them)
        self._closed = False  # the writer ended the stream
        self._reader_gone = False  # the reader closed its end: deliveries fail
        # The parked reader: a trio Task or an asyncio Future; None when it is not waiting.
        self._waiter: Any = None
        self._trio: bool | None = None  # the reader's backend, learnt at its first wait
        self._loop: asyncio.AbstractEventLoop | None = None  # the reader's, under asyncio
        # The reader was woken by a delivery and has not run since; ``_wakes`` counts such
        # readers over the streams that share it (the ledger's).
        self._woken = False
        self._wakes = wakes if wakes is not None else WakeCount()

    def __len__(self) -> int:
        """Deliveries not read yet (the backlog), merged ones included."""
        return len(self._items) + self._folded

    @property
    def merged(self) -> int:
        """Deliveries folded into an unread one so far: each is a step whose output the
        reader did not take before the next one came."""
        return self._merged

    # -- the writer ---------------------------------------------------------------------------

    def send_nowait(self, item: T) -> None:
        """Deliver ``item``; never blocks (see the module doc for what raises)."""
        if self._reader_gone:
            raise anyio.BrokenResourceError
        if self._closed:
            raise anyio.ClosedResourceError
        if not self._items:
            self._wakes.unread += 1
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None:  # _wake(), written out: this runs once per output
            self._waiter = None
            self._woken = True
            self._wakes.pending += 1
            if self._trio:
                _reschedule(waiter)
            elif not waiter.done():
                waiter.set_result(None)

    def offer(self, item: T, limit: float) -> bool | None:
        """:meth:`send_nowait` unless ``limit`` items are unread (then False: nothing
        sent); None when the reader went away or the stream is closed. One call per
        delivery on the engine's hot path (``RequestLedger.deliver_step``)."""
        if self._reader_gone or self._closed:
            return None
        items = self._items
        if items:  # the reader is behind (or not scheduled yet): no wake-up needed
            if len(items) + self._folded >= limit:
                return False
            merge = self._merge
            if merge is not None and len(items) == 1:
                merged = merge(items[0], item)
                if merged is not None:
                    items[0] = merged
                    self._folded += 1
                    self._merged += 1
                    return True
        elif limit < 1:
            return False
        else:
            self._wakes.unread += 1
        items.append(item)
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            self._woken = True
            self._wakes.pending += 1
            if self._trio:
                _reschedule(waiter)
            elif not waiter.done():
                waiter.set_result(None)
        return True

    def close(self) -> None:
        """End the stream: the reader gets what is buffered, then the end. Idempotent."""
        self._closed = True
        if self._waiter is not None:
            self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        self._woken = True
        self._wakes.pending += 1
        if self._trio:
            trio.lowlevel.reschedule(waiter)
        elif not waiter.done():
            waiter.set_result(None)

    # -- the reader ---------------------------------------------------------------------------

    async def receive(self) -> T:
        """The next item (a checkpoint); ``anyio.EndOfStream`` once closed and drained."""
        if self._items:
            await anyio.lowlevel.checkpoint()
        elif not self._closed and not self._reader_gone:
            await self._park()
        if self._items:
            self._folded = 0
            item = self._items.popleft()
            if not self._items:
                self._wakes.unread -= 1
            return item
        if self._reader_gone:
            raise anyio.ClosedResourceError
        raise anyio.EndOfStream

    def __aiter__(self) -> RequestStream[T]:
        return self

    async def __anext__(self) -> T:
        # receive() and _park(), written out: two coroutine frames less per output.
        if self._items:
            await anyio.lowlevel.checkpoint()
        elif not self._closed and not self._reader_gone:
            if self._trio:
                self._waiter = _current_task()
                try:
                    await _wait_task_rescheduled(self._abort)
                finally:
                    if self._woken:  # _ran(), written out
                        self._woken = False
                        self._wakes.pending -= 1
            elif self._loop is not None:  # asyncio, once _park learnt the loop
                future = self._loop.create_future()
                self._waiter = future
                try:
                    await future
                finally:
                    self._waiter = None
                    self._ran()
            else:
                await self._park()
        if self._items:
            self._folded = 0
            item = self._items.popleft()
            if not self._items:
                self._wakes.unread -= 1
            return item
        if self._reader_gone:
            raise anyio.ClosedResourceError
        raise StopAsyncIteration

    async def _park(self) -> None:
        """Wait for a delivery or the end (cancellable; a cancelled wait loses nothing)."""
        if self._trio is None:
            self._trio = sniffio.current_async_library() == "trio"
        if self._trio:
            self._waiter = trio.lowlevel.current_task()
            try:
                await trio.lowlevel.wait_task_rescheduled(self._abort)
            finally:
                self._ran()
        else:
            self._loop = loop = asyncio.get_running_loop()
            future = loop.create_future()
            self._waiter = future
            try:
                await future
            finally:
                self._waiter = None
                self._ran()

    def _ran(self) -> None:
        """The reader runs again: it is no longer a woken reader waiting for its turn."""
        if self._woken:
            self._woken = False
            self._wakes.pending -= 1

    def _abort(self, _: Any) -> trio.lowlevel.Abort:
        """trio cancels the parked reader: forget it (nothing was taken)."""
        self._waiter = None
        return trio.lowlevel.Abort.SUCCEEDED

    def close_reader(self) -> None:
        """The reader goes away: later deliveries raise ``BrokenResourceError``."""
        self._reader_gone = True
        if self._items:
            self._wakes.unread -= 1
        self._items.clear()
        self._folded = 0

    async def aclose(self) -> None:
        self.close_reader()

    async def __aenter__(self) -> RequestStream[T]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close_reader()

    def statistics(self) -> RequestStreamStatistics:
        return RequestStreamStatistics(
            current_buffer_used=len(self._items) + self._folded,
            max_buffer_size=math.inf,
            reader_waiting=self._waiter is not None,
            closed=self._closed,
            merged=self._merged,
        )
