"""``ActorCell``: the persistent home of one supervised actor, and its incarnations.

Theory of operation: the cell is created once per child by its supervisor and owns what
must outlive an instance — the mailbox, the ref, the counters, the probes. Each call to
:meth:`ActorCell.run_incarnation` builds a fresh instance with the spec's factory and runs
it (see :mod:`actorllm.actors.actor` for the hook order) inside two scopes:

* a *hard* cancel scope whose deadline a stop request sets to now + ``shutdown_timeout``;
* the incarnation's task group (``Actor.task_group``), which holds the background work.

The cell tracks the envelope in hand (taken from the mailbox and not yet finished). When
the actor asks for its next message, the previous one is finished: an open, non-deferred
reply fails with ``NoReply``, a deferred one is remembered. When the incarnation ends,
everything it still holds is resolved so no asker can hang: the message in hand goes to
the dead-letter hook and its reply fails (``ActorCrashed`` or ``ActorStopped``), and so do
the deferred replies.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from time import perf_counter
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast, final

import anyio
import msgspec
from anyio.abc import TaskGroup
from anyio.lowlevel import checkpoint

from actorllm.actors.errors import (
    ActorCrashed,
    ActorHung,
    ActorStopped,
    NoReply,
    is_fatal,
    unwrap,
)
from actorllm.actors.lifecycle import ActorState, LifecycleEvent, next_state
from actorllm.actors.mailbox import Envelope, Mailbox, MailboxStatistics
from actorllm.actors.probes import Probe
from actorllm.actors.ref import ActorRef
from actorllm.actors.reply import Reply
from actorllm.actors.spec import ChildSpec, DeadLetterHook
from actorllm.actors.watchdog import Watchdog

if TYPE_CHECKING:
    from actorllm.actors.activity import Activity
    from actorllm.actors.actor import Actor
    from actorllm.actors.supervisor import Supervisor

M = TypeVar("M")

log = logging.getLogger("actorllm.actors")

# An actor with a backlog takes this many messages per turn of the event loop before it
# lets the other tasks run. One per turn throttled a busy engine: under load a turn is about
# one engine step, so a burst of new requests crossed the input processor and the router
# one request per step (tests/engine/recovery/test_admission_under_load.py).
BACKLOG_RUN = 32
# ... or as many as it takes this long (seconds) from the run's first one, if fewer: slow
# messages (a long prompt to tokenize) do not hold the loop for 32 of them.
BACKLOG_RUN_S = 0.002
_S = ActorState
_E = LifecycleEvent


class ActorStatistics(msgspec.Struct, frozen=True, kw_only=True, tag="actor"):
    """A snapshot of one supervised actor."""

    name: str
    state: str
    incarnation: int  # 1 for the first start
    restarts: int  # incarnations after the first
    handled: int  # messages finished without a crash, all incarnations
    crashes: int  # incarnations that ended by an exception
    dead_letters: int  # messages handed to the dead-letter hook
    mailbox: MailboxStatistics
    # The running incarnation's own report (``Actor.report()``), None when it has none or
    # no incarnation is running.
    report: Any = None
    hangs: int = 0  # crashes by the watchdog (a message held past its deadline)


@final
class Inbox(Generic[M]):
    """``async for msg in self.inbox``: the actor's messages, one at a time.

    Each step finishes the previous message (reply check) and takes the next one: it waits
    while the mailbox is empty (the checkpoint); from a backlog it takes up to
    :data:`BACKLOG_RUN` messages in a row (fewer when they took :data:`BACKLOG_RUN_S`),
    then yields to the other tasks. It ends
    (``StopAsyncIteration``) once a stop was requested.
    """

    __slots__ = ("_cell",)

    def __init__(self, cell: ActorCell[M]) -> None:
        self._cell = cell

    def __aiter__(self) -> Inbox[M]:
        return self

    async def __anext__(self) -> M:
        return await self._cell.next_message()


@final
class ActorCell(Generic[M]):
    """Runtime side of one actor child. Created and driven by its :class:`Supervisor`."""

    def __init__(self, spec: ChildSpec[M], supervisor: Supervisor, activity: Activity) -> None:
        self.spec = spec
        self.name = spec.name
        self.restart = spec.restart
        self.shutdown_timeout = spec.shutdown_timeout
        self.supervisor = supervisor
        self.mailbox: Mailbox[M] = Mailbox(spec.name, spec.mailbox_size)
        self.ref: ActorRef[M] = ActorRef(self)
        self.inbox: Inbox[M] = Inbox(self)
        # Called on each message taken; may raise (a crash) or return an awaitable (a stall).
        self.probes: list[Probe] = []
        self.state = ActorState.NEW
        self.incarnation = 0
        self.handled = 0
        self.crashes = 0
        self.dead_letters = 0
        self.hangs = 0
        self._activity = activity
        # Per incarnation:
        self.task_group: TaskGroup | None = None
        self.stopping = False  # a stop was requested: the inbox ends at the next step
        self._current: Envelope[M] | None = None  # taken, not finished
        self._deferred: set[Reply[Any]] = set()  # deferred, still open
        self._waiting = False  # asleep on an empty mailbox
        self._run = 0  # messages taken since the last checkpoint (a yield or a wait)
        self._run_start = 0.0  # perf_counter() at that checkpoint
        self._hard_scope: anyio.CancelScope | None = None
        self._instance: Actor[M] | None = None  # the running incarnation, for report()
        self._watchdog: Watchdog | None = None  # with spec.message_deadline only

    # -- lifecycle ----------------------------------------------------------------------------

    def transition(self, event: LifecycleEvent) -> None:
        self.state = next_state(self.state, event)

    @property
    def dead_letter_hook(self) -> DeadLetterHook | None:
        return self.spec.dead_letter or self.supervisor.dead_letter_hook

    async def run_incarnation(
        self, on_started: Callable[[], None], cause: BaseException | None
    ) -> None:
        """Run one incarnation to its end.

        Calls ``on_started()`` once ``on_start`` returned. Returns when the incarnation ends
        normally, by a graceful stop, or by the shutdown timeout; raises the (unwrapped)
        exception that crashed it. Cancellation, KeyboardInterrupt and SystemExit propagate.
        """
        self.transition(_E.START)
        self.incarnation += 1
        self.stopping = False
        self._current = None
        self._deferred = set()
        crash: BaseException | None = None
        with anyio.CancelScope() as hard:
            self._hard_scope = hard
            try:
                instance = self.spec.factory(*self.spec.args, **self.spec.kwargs)
                instance._bind(self)
                self._instance = instance
                await self._serve(instance, on_started, cause)
            except BaseException as exc:
                if is_fatal(exc):  # outside cancellation, or our own shutdown timeout
                    self._release(None, "was cancelled")
                    self.transition(_E.EXIT)
                    raise
                crash = unwrap(exc)
            finally:
                self._hard_scope = None
                self._instance = None
        if hard.cancelled_caught:
            log.warning("actor %r overran its shutdown timeout; cancelled", self.name)
        elif crash is not None:
            self.crashes += 1
            self.hangs += isinstance(crash, ActorHung)
            self._release(crash, "")
            self.transition(_E.CRASH)
            raise crash
        else:
            self._release(None, "stopped before replying")
            self.transition(_E.EXIT)

    async def _serve(
        self, instance: Actor[M], on_started: Callable[[], None], cause: BaseException | None
    ) -> None:
        started = on_stop_ran = False
        try:
            async with anyio.create_task_group() as group:
                self.task_group = group
                if self.spec.message_deadline is not None:
                    self._watchdog = Watchdog(self.name, self.spec.message_deadline)
                    group.start_soon(self._watchdog.run, name=f"watchdog {self.name}")
                if self.incarnation > 1:
                    await instance.on_restart(cause)
                await instance.on_start()
                started = True
                self.transition(_E.STARTED)
                on_started()
                await instance.run()
                self._finish_current()
                on_stop_ran = True
                await instance.on_stop()
                group.cancel_scope.cancel()  # background work ends with the incarnation
        except BaseException as exc:
            if started and not on_stop_ran and not is_fatal(exc):
                await self._cleanup(instance)
            raise
        finally:
            self.task_group = None
            self._watchdog = None

    async def _cleanup(self, instance: Actor[M]) -> None:
        """Run ``on_stop`` after a crash: shielded, bounded by ``shutdown_timeout``."""
        with anyio.CancelScope(shield=True) as scope:
            if self.shutdown_timeout is not None:
                scope.deadline = anyio.current_time() + self.shutdown_timeout
            try:
                await instance.on_stop()
            except Exception:
                log.exception("on_stop of %r failed while cleaning up after a crash", self.name)

    def request_stop(self, *, self_requested: bool = False) -> None:
        """Ask the incarnation to stop after its current message (never blocks).

        A stop from the supervisor also arms the shutdown timeout; one the actor asks for
        itself (``Actor.stop``) does not.
        """
        self.stopping = True
        if self.state is _S.RUNNING:
            self.transition(_E.STOP)
        self.mailbox.wake()
        scope, timeout = self._hard_scope, self.shutdown_timeout
        if not self_requested and scope is not None and timeout is not None:
            scope.deadline = min(scope.deadline, anyio.current_time() + timeout)

    # -- messages --------------------------------------------------------------------------------

    async def next_message(self) -> M:
        """Finish the message in hand and take the next one (see :class:`Inbox`)."""
        self._finish_current()
        mailbox = self.mailbox
        if mailbox.depth and (  # a backlog: a run of messages, then the other tasks
            self._run >= BACKLOG_RUN or perf_counter() - self._run_start > BACKLOG_RUN_S
        ):
            await checkpoint()
            self._run, self._run_start = 0, perf_counter()
        # (else the wait below is the checkpoint: no task step spent on a yield before it)
        while True:
            if self.stopping:
                raise StopAsyncIteration
            envelope = mailbox.take_nowait()
            if envelope is not None:
                break
            self._waiting = True
            self._activity.poke()
            try:
                await mailbox.wait_nonempty()
            finally:
                self._waiting = False
            self._run, self._run_start = 0, perf_counter()  # the wait was a checkpoint
        self._run += 1
        self._current = envelope
        if self._watchdog is not None:
            self._watchdog.taken(envelope[0])
        if self.probes:
            for probe in list(self.probes):
                stall = probe(self.name, envelope[0])
                if stall is not None:
                    await stall  # held, as if handle() were slow (see actors/probes.py)
        return envelope[0]

    def _finish_current(self) -> None:
        current = self._current
        if current is None:
            return
        self._current = None
        self.handled += 1
        if self._watchdog is not None:
            self._watchdog.finished()
        msg, reply = current
        if reply is not None and not reply.done:
            if reply.deferred:
                self._deferred.add(reply)
                reply._on_done = self._deferred.discard
            else:
                reply._fail_if_open(NoReply(self.name, msg))

    def _release(self, crash: BaseException | None, detail: str) -> None:
        """Resolve what the ending incarnation holds (see the module docstring)."""
        current, self._current = self._current, None
        if current is not None:
            msg, reply = current
            error: BaseException = (
                ActorCrashed(self.name, crash)
                if crash is not None
                else ActorStopped(self.name, "stopped while handling the message")
            )
            if reply is not None:
                reply._fail_if_open(error)
            self.report_dead_letter(msg, crash if crash is not None else error)
        for reply in list(self._deferred):
            reply._fail_if_open(
                ActorCrashed(self.name, crash)
                if crash is not None
                else ActorStopped(self.name, detail)
            )
        self._deferred.clear()

    def report_dead_letter(self, msg: object, exc: BaseException) -> None:
        self.dead_letters += 1
        hook = self.dead_letter_hook
        if hook is None:
            log.warning("dead letter for %r: %r (%r)", self.name, msg, exc)
            return
        try:
            redeliver = hook(self.name, msg, exc)
        except Exception:
            log.exception("dead-letter hook failed for %r", self.name)
            return
        # A hook may return messages to retry: they go back to the front of the mailbox,
        # in order, for the next incarnation (not once the mailbox is closed for good).
        if redeliver and not self.mailbox.closed:
            for again in reversed(list(redeliver)):
                self.mailbox.put_front(cast(M, again))

    def close(self) -> None:
        """The child is gone for good: fail and dead-letter what is queued, refuse sends."""

        def dropped(msg: M, reply: Reply[Any] | None) -> None:
            error = ActorStopped(self.name)
            if reply is not None:
                reply._fail_if_open(error)
            self.report_dead_letter(msg, error)

        self.mailbox.close(dropped)

    # -- observation -------------------------------------------------------------------------------

    def is_idle(self) -> bool:
        """Running, asleep on its mailbox, nothing queued."""
        return self.state is _S.RUNNING and self._waiting and self.mailbox.depth == 0

    def statistics(self) -> ActorStatistics:
        return ActorStatistics(
            name=self.name,
            state=self.state.value,
            incarnation=self.incarnation,
            restarts=max(0, self.incarnation - 1),
            handled=self.handled,
            crashes=self.crashes,
            dead_letters=self.dead_letters,
            mailbox=self.mailbox.statistics(),
            report=self._instance.report() if self._instance is not None else None,
            hangs=self.hangs,
        )
