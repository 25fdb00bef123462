"""``EngineThread``: an :class:`AsyncEngine` on its own event loop, for vLLM's front doors.

    thread = EngineThread(EngineConfig(model="/path/to/model", max_num_seqs=8), backend="trio")
    outs = thread.call(some_coroutine_function, thread.engine, ...)   # blocks this thread
    thread.close()                                                     # idempotent

Theory of operation
-------------------
vLLM's front doors run outside the engine's loop; the engine is async. Each owns one
EngineThread (through its :class:`~actorllm.compat.vllm.bridge.Bridge`): a thread whose
event loop (trio by default) opens the engine, then a ``BlockingPortal`` through which the
owner's thread runs coroutines on the loop, then waits to be stopped.

A script can end in many ways and each must end the process promptly: the engine is never
closed (a module-level ``llm = LLM(...)``), dropped (``del llm``), closed by ``with``, or the
script dies of an exception or of Ctrl-C. So:

* the loop runs on a **non-daemon** thread we own, and a hook registered with
  ``threading._register_atexit`` closes every live EngineThread at interpreter shutdown.
  Those hooks run *before* the interpreter joins non-daemon threads, while every thread still
  runs. (Not anyio's ``start_blocking_portal``: it runs the loop on a daemon thread and stops
  it from its context manager's exit, which for a never-closed ``LLM`` runs while the
  interpreter finalizes, after daemon threads are frozen, and waits for them forever.)
* The bridge registers ``weakref.finalize(bridge, thread.close)``: dropping the last
  reference to the ``LLM`` closes its engine.
* :meth:`call` waits for its task on the caller's thread. When that wait is interrupted
  (Ctrl-C raises ``KeyboardInterrupt`` in the main thread), the task is cancelled on the
  loop, which aborts its requests, and the exception goes on after a short grace period.
* :meth:`close` signals the loop without blocking it (a callback posted to the loop), then
  joins the thread: the engine stops its actors and its worker thread before the loop ends.
  Called on the loop thread itself (a garbage collection that ran there), it only signals.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import CancelledError, Future
from typing import Any, TypeVar, final

import anyio
from anyio.from_thread import BlockingPortal

from actorllm.engine.api.async_engine import AsyncEngine
from actorllm.engine.config.engine_config import EngineConfig
from actorllm.engine.errors import EngineClosedError
from actorllm.worker.omp_spin import release_thread_team
from actorllm.worker.worker_thread import LoopPoster

T = TypeVar("T")

# How long a call interrupted by Ctrl-C waits for its cancelled task to abort its requests.
CANCEL_GRACE_S = 1.0

_live: weakref.WeakSet[EngineThread] = weakref.WeakSet()  # EngineThreads not yet closed
_hook_lock = threading.Lock()
_hook_registered = False


def _close_all_at_exit() -> None:
    for thread in list(_live):
        thread.close()


def _register_exit_hook() -> None:
    global _hook_registered
    with _hook_lock:
        if not _hook_registered:
            # Private but stable since 3.9 (concurrent.futures relies on it): runs in
            # threading._shutdown, before non-daemon threads are joined.
            threading._register_atexit(_close_all_at_exit)  # type: ignore[attr-defined]
            _hook_registered = True


@final
class EngineThread:
    """Owns one AsyncEngine, its event loop and the thread that runs it.

    The constructor blocks until the engine is up (model loaded) and raises what start-up
    raised (``ModelNotFoundError``, ``EngineConfigError``, ...).
    """

    def __init__(
        self,
        config: EngineConfig,
        *,
        backend: str = "trio",
        name: str = "actorllm-engine",
        **open_options: Any,
    ) -> None:
        self._config = config
        self._open_options = open_options  # AsyncEngine.open's other keywords
        self._backend = backend
        self._lock = threading.Lock()
        # Guarded by _lock: set once by close(); the loop's poster, once the loop runs.
        self._closing = False
        self._poster: LoopPoster | None = None
        # Loop-side state, touched only on the loop thread.
        self._stop: anyio.Event | None = None
        self._scope: anyio.CancelScope | None = None
        self._ready: Future[tuple[AsyncEngine, BlockingPortal]] = Future()
        self.failure: BaseException | None = None  # what ended the loop, if not close()
        _register_exit_hook()
        self._thread = threading.Thread(target=self._main, name=name, daemon=False)
        self._thread.start()
        _live.add(self)
        try:
            self.engine, self._portal = self._ready.result()
        except BaseException:
            self.close()
            raise
        # The caller's thread idles while the engine works: free the OpenMP team its earlier
        # torch work left, so the worker's team keeps libgomp's long spins (omp_spin.py).
        self._release_team = self.engine.config.releases_host_openmp_team()
        self.release_caller_team()

    def release_caller_team(self) -> None:
        """Free the calling thread's idle OpenMP team (CPU engines, unless
        ``cpu_omp_short_spin``): call before the thread blocks on the engine."""
        if self._release_team:
            release_thread_team()

    # -- the loop thread ------------------------------------------------------------------

    def _main(self) -> None:
        try:
            anyio.run(self._serve, backend=self._backend)
        except BaseException as exc:  # start-up failed, or the engine died
            self.failure = exc
            if not self._ready.done():
                self._ready.set_exception(exc)
        finally:
            if not self._ready.done():  # closed during start-up
                self._ready.set_exception(EngineClosedError("the engine was closed"))

    async def _serve(self) -> None:
        self._stop = anyio.Event()
        with anyio.CancelScope() as self._scope:
            with self._lock:
                self._poster = LoopPoster()
                if self._closing:
                    return
            async with (
                AsyncEngine.open(self._config, **self._open_options) as engine,
                BlockingPortal() as portal,
            ):
                self._ready.set_result((engine, portal))
                await self._stop.wait()
                # Calls still running (another thread's generate) end now.
                await portal.stop(cancel_remaining=True)

    def _stop_soon(self) -> None:
        """On the loop: end a running engine normally, or abandon its start-up."""
        assert self._stop is not None and self._scope is not None
        if self._ready.done():
            self._stop.set()
        else:
            self._scope.cancel()

    # -- the caller's side ----------------------------------------------------------------

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``await fn(*args)`` on the loop and block until it returns or raises.

        Interrupted (Ctrl-C), it cancels the task, waits up to ``CANCEL_GRACE_S`` for the
        task to wind down (its requests are aborted), and lets the interruption go on.
        Raises ``EngineClosedError`` once :meth:`close` was called.
        """
        done = threading.Event()
        job = _one_shot(fn, args)

        async def run() -> T:
            try:
                return await job()
            finally:
                done.set()

        try:
            future = self._portal.start_task_soon(run)
        except RuntimeError as exc:  # "This portal is not running"
            raise EngineClosedError("the engine was closed") from exc
        self.release_caller_team()
        try:
            return future.result()
        except CancelledError as exc:  # close() from another thread cancelled it
            raise EngineClosedError("the engine was closed during the call") from exc
        except BaseException:
            if not future.done():
                future.cancel()
                done.wait(CANCEL_GRACE_S)
            raise

    def spawn(self, fn: Callable[..., Awaitable[object]], *args: Any) -> Future[Any]:
        """Start ``fn(*args)`` on the loop without waiting; cancel the future to cancel it."""
        try:
            return self._portal.start_task_soon(_one_shot(fn, args))
        except RuntimeError as exc:
            raise EngineClosedError("the engine was closed") from exc

    @property
    def closed(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Stop the engine and end the thread; idempotent, callable from any thread."""
        with self._lock:
            first = not self._closing
            self._closing = True
            poster = self._poster
        if first and poster is not None:
            poster.post(self._stop_soon)
        _live.discard(self)
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def statistics(self) -> dict[str, Any]:
        return {
            "alive": self._thread.is_alive(),
            "closing": self._closing,
            "failure": repr(self.failure) if self.failure is not None else None,
        }


def _one_shot(fn: Callable[..., Awaitable[T]], args: tuple[Any, ...]) -> Callable[[], Awaitable[T]]:
    """``fn(*args)`` as a call that lets go of ``fn`` and ``args`` before its result is
    published. The portal keeps the function it ran until after it has set the caller's
    future; were that ``fn`` itself (often a front door's bound method), the loop thread
    would still hold the front door when the caller, woken, drops its last reference, and
    the door's finalizer would then run on the loop thread, which cannot join itself: a
    script's ``del llm`` would leave the engine's threads running."""
    job: list[Callable[[], Awaitable[T]]] = [functools.partial(fn, *args)]

    async def run() -> T:
        return await job.pop()()

    return run
