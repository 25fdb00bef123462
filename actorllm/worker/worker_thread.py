"""The one dedicated thread that owns the model runner.

Theory of operation
-------------------
Torch work must not run on the event-loop thread (a step can take hundreds of ms), and must
not hop between threads either (CUDA streams, graphs and the runner's persistent buffers
belong to one thread). So the engine starts exactly one :class:`WorkerThread` and keeps it
for its whole life — across actor restarts, which is why the weights survive an executor
crash. Jobs are plain callables executed in submission order; each job's outcome is handed
back to the event loop with ``anyio.from_thread.run_sync(..., token=...)``, which works the
same on trio and asyncio. The loop never waits on the thread except through such callbacks.

    worker = WorkerThread(name="actorllm-worker")
    worker.start()
    result = await worker.call(lambda: 2 + 2)   # runs on the worker thread
    worker.stop()
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel

T = TypeVar("T")


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """A job's result or the exception it raised."""

    value: T | None = None
    error: BaseException | None = None

    def unwrap(self) -> T:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


@dataclass
class _Job:
    fn: Callable[[], Any]
    on_done: Callable[[Outcome[Any]], None] | None
    token: anyio.lowlevel.EventLoopToken | None


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
        token = anyio.lowlevel.current_token() if on_done is not None else None
        self._queue.put(_Job(fn, on_done, token))

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

    def statistics(self) -> dict[str, Any]:
        return {
            "alive": self._thread.is_alive(),
            "queued": self._queue.qsize(),
            "jobs_done": self._jobs_done,
            "busy": self._busy,
        }

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
            if job.on_done is not None:
                # The loop may be gone (engine shut down): then nobody is left to tell.
                with contextlib.suppress(Exception):
                    anyio.from_thread.run_sync(job.on_done, outcome, token=job.token)
