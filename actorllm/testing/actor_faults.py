"""Fault injection and quiescence for tests of actor trees.

``inject_fault`` uses the runtime's instrumentation point (:mod:`actorllm.actors.probes`),
so the crash happens exactly where a real one would: the actor takes its n-th message and
fails while holding it (dead letter, failed reply, restart by its supervisor). No user code
is patched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, final

import anyio

from actorllm.actors import ActorRef, Supervisor, attach_probe

ExceptionSpec = BaseException | type[BaseException]


@final
class Fault:
    """A fault armed on one actor. :attr:`fired` counts how many times it crashed it."""

    def __init__(
        self,
        exc: ExceptionSpec,
        on_message: int,
        times: int,
        match: Callable[[object], bool] | None,
    ) -> None:
        self._exc = exc
        self._on_message = on_message
        self._times = times
        self._match = match
        self.seen = 0  # matching messages taken since the fault was armed
        self.fired = 0
        self._detach: Callable[[], None] = lambda: None

    def __call__(self, name: str, msg: object) -> None:
        if self._match is not None and not self._match(msg):
            return
        self.seen += 1
        if self.seen < self._on_message or self.fired >= self._times:
            return
        self.fired += 1
        if self.fired >= self._times:
            self.remove()
        if isinstance(self._exc, type):
            raise self._exc(f"fault injected into {name!r} at message {self.seen}")
        raise self._exc

    def remove(self) -> None:
        """Disarm (idempotent)."""
        self._detach()

    @property
    def exhausted(self) -> bool:
        return self.fired >= self._times


def inject_fault(
    ref: ActorRef[Any],
    exc: ExceptionSpec = RuntimeError,
    *,
    on_message: int = 1,
    times: int = 1,
    match: type | Callable[[object], bool] | None = None,
) -> Fault:
    """Crash the actor behind ``ref`` when it takes its ``on_message``-th message from now.

    ``exc`` is an exception instance or class (a class is instantiated with a message).
    ``times`` > 1 also crashes it on each following message until it has fired that many
    times (a crash loop, e.g. to reach a restart limit). ``match`` counts only the messages
    of that type (or for which the predicate is true). The fault survives restarts and
    disarms itself when exhausted.

    Example::

        fault = inject_fault(ref, ValueError, on_message=2)
        await ref.send(Add(n=1))
        await ref.send(Add(n=2))   # crashes the actor; Add(n=2) is a dead letter
        await wait_idle(sup)
        assert fault.fired == 1
    """
    if on_message < 1 or times < 1:
        raise ValueError("on_message and times must be >= 1")
    predicate: Callable[[object], bool] | None
    if isinstance(match, type):
        kind = match
        predicate = lambda msg: isinstance(msg, kind)  # noqa: E731
    else:
        predicate = match
    fault = Fault(exc, on_message, times, predicate)
    fault._detach = attach_probe(ref, fault)
    return fault


# ASYNC109: a bounded wait is what a test wants; anyio.fail_after is applied inside.
async def wait_idle(supervisor: Supervisor, *, timeout: float = 10.0) -> None:  # noqa: ASYNC109
    """Wait until every actor under ``supervisor`` sleeps on an empty mailbox.

    Also waits out pending restarts (backoff) and supervisor work. Background tasks in
    ``Actor.task_group`` are not tracked. Raises ``TimeoutError`` after ``timeout`` seconds
    (virtual seconds under a MockClock).
    """
    with anyio.fail_after(timeout):
        await supervisor.wait_idle()
