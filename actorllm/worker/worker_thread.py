"""The one dedicated thread that owns the model runner.

Theory of operation
-------------------
Torch work must not run on the event-loop thread (a step can take hundreds of ms), and must
not hop between threads either (CUDA streams, graphs and the runner's persistent buffers
belong to one thread). So the engine starts exactly one :class:`WorkerThread` and keeps it
for its whole life — across actor restarts, which is why the weights survive an executor
crash. Jobs are plain callables executed in submission order; each job's outcome is handed
back to the event loop by a :class:`LoopPoster`: ``run_sync_soon`` on trio,
``call_soon_threadsafe`` on asyncio. The thread never waits for the loop to run the callback
(a blocking hand-off such as ``anyio.from_thread.run_sync`` would stall the thread, and with
it the device, for as long as the loop is busy with other actors). The loop never waits on
the thread except through such callbacks.

    worker = WorkerThread(name="actorllm-worker")
    worker.start()
    result = await worker.call(lambda: 2 + 2)   # runs on the worker thread
    worker.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

import anyio
import anyio.lowlevel
import msgspec

T = TypeVar("T")

log = logging.getLogger(__name__)


class LoopPoster:
    """Made on the event loop; lets any thread run a callback on that loop soon, in FIFO
    order, without waiting for it. A loop that has shut down drops the callback.

    The callback runs as a bare loop callback (no task, no cancel scope): it must be quick
    and must not await. An exception it raises is logged, never propagated into the loop.
    """

    def __init__(self) -> None:
        native = anyio.lowlevel.current_token().native_token
        if isinstance(native, asyncio.AbstractEventLoop):
            self._schedule: Callable[[Callable[[], None]], object] = native.call_soon_threadsafe
        else:  # anyio's only other backend: trio's TrioToken
            self._schedule = native.run_sync_soon  # type: ignore[attr-defined]

    def post(self, fn: Callable[..., object], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop soon; never blocks, never raises."""

        def run() -> None:
            try:
                fn(*args)
            except Exception:  # a loop callback must not raise (trio would crash the run)
                log.exception("callback posted to the event loop failed")

        with contextlib.suppress(Exception):  # the loop is closed: nobody is left to tell
            self._schedule(run)


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """A job's result or the exception it raised."""

    value: T | None = None
    error: BaseException | None = None

    def unwrap(self) -> T:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


class WorkerThreadStatistics(msgspec.Struct, frozen=True, kw_only=True):
    alive: bool
    queued: int  # jobs waiting behind the running one
    jobs_done: int
    busy: bool  # a job is running (read from the loop: informative only)


@dataclass
class _Job:
    fn: Callable[[], Any]
    notify: Callable[[Outcome[Any]], None] | None  # hands the outcome to the loop


class WorkerThread:
    """A single long-lived thread running submitted callables in order."""

    def __init__(self, name: str = "actorllm-worker") -> None:
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._jobs_done = 0  # written by the worker thread only
        self._busy = False  # a job is running (read from the loop: informative only)

    def start(self) -> None:
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def has_queued_jobs(self) -> bool:
        """Whether jobs wait behind the running one (read on the worker thread by the
        step pipeline to decide whether to launch ahead)."""
        return not self._queue.empty()

    def submit(
        self, fn: Callable[[], T], on_done: Callable[[Outcome[T]], None] | None = None
    ) -> None:
        """Queue ``fn``; never blocks. Must be called from the event loop when ``on_done`` is
        given: ``on_done(outcome)`` later runs on that loop."""
        notify = partial(LoopPoster().post, on_done) if on_done is not None else None
        self._queue.put(_Job(fn, notify))

    async def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the worker thread and return its result (or raise its exception).

        Cancelling the caller does not stop ``fn``; its result is then discarded.
        """
        done = anyio.Event()
        box: list[Outcome[T]] = []

        def finish(outcome: Outcome[T]) -> None:
            box.append(outcome)
            done.set()

        self.submit(fn, finish)
        await done.wait()
        return box[0].unwrap()

    def stop(self, timeout: float | None = 10.0) -> None:
        """Ask the thread to exit after the queued jobs; waits up to ``timeout`` seconds."""
        self._queue.put(None)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def statistics(self) -> WorkerThreadStatistics:
        return WorkerThreadStatistics(
            alive=self._thread.is_alive(),
            queued=self._queue.qsize(),
            jobs_done=self._jobs_done,
            busy=self._busy,
        )

    def _main(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            self._busy = True
            try:
                outcome: Outcome[Any] = Outcome(value=job.fn())
            except BaseException as exc:  # handed to the loop, never lost on this thread
                outcome = Outcome(error=exc)
            self._busy = False
            self._jobs_done += 1
            if job.notify is not None:
                job.notify(outcome)
