"""``Supervisor``: starts children in order, restarts them by policy, stops them in reverse.

Theory of operation: a supervisor is a persistent node (it owns its children's cells and
therefore their mailboxes) that runs *incarnations*, like an actor. One incarnation:

1. starts every child in order, each in its own task of the incarnation's task group,
   waiting for each to be started (``on_start`` returned) before the next;
2. runs an event loop over an internal queue: ``ChildExit`` (a child ended on its own),
   ``RestartDue`` (a backoff timer fired) and ``StopAll``; one event at a time, under
   ``_lock`` (which ``start_child``/``stop_child`` also take);
3. ends after ``StopAll`` (children stopped in reverse order) or by raising
   :class:`SupervisorEscalation` when the restart intensity is exceeded (children stopped
   first), or :class:`SupervisorGaveUp` at once when a child failed
   :class:`Unrecoverable`. A parent supervisor sees that as this child's crash (and gives
   up too on a give-up, unless the child is one it removes rather than restarts).

A child task never lets an ordinary exception out (it becomes a ``ChildExit`` event), so one
child's crash never cancels its siblings; cancellation, KeyboardInterrupt and SystemExit
do propagate. Stale events (from an incarnation that was since stopped or replaced) are
recognised by a per-slot generation number and ignored. The slots and the events are
``supervisor_slots.py``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
from collections.abc import Callable
from typing import Any, TypeVar, final, overload

import anyio
import msgspec
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from actorllm.actors.activity import Activity
from actorllm.actors.cell import ActorCell, ActorStatistics
from actorllm.actors.errors import (
    ActorStopped,
    StartFailed,
    SupervisorEscalation,
    SupervisorGaveUp,
    is_fatal,
    unrecoverable,
    unwrap,
)
from actorllm.actors.lifecycle import ActorState, LifecycleEvent, next_state
from actorllm.actors.policy import RestartIntensity, restart_group
from actorllm.actors.ref import ActorRef
from actorllm.actors.spec import ChildSpec, DeadLetterHook, Restart, SupervisorSpec
from actorllm.actors.supervisor_slots import ChildExit, LoopEvent, Node, RestartDue, Slot, StopAll

M = TypeVar("M")

log = logging.getLogger("actorllm.actors")

_S = ActorState
_E = LifecycleEvent
_LIVE = (_S.STARTING, _S.RUNNING, _S.STOPPING)


class SupervisorStatistics(msgspec.Struct, frozen=True, kw_only=True, tag="supervisor"):
    """A snapshot of a supervisor and, recursively, its children (in start order)."""

    name: str
    state: str
    strategy: str
    incarnation: int
    restarts: int  # incarnations after the first (restarts by the parent)
    child_restarts: int  # restarts this supervisor performed
    children: tuple[ActorStatistics | SupervisorStatistics, ...]


@final
class Supervisor:
    """A supervisor node. Get one from ``open_supervisor`` or ``start_child(SupervisorSpec)``."""

    def __init__(
        self, spec: SupervisorSpec, *, parent: Supervisor | None, activity: Activity | None = None
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.restart = spec.restart
        self.shutdown_timeout = spec.shutdown_timeout
        self.parent = parent
        self.state = _S.NEW
        self.incarnation = 0
        self.child_restarts = 0
        self._activity = activity if activity is not None else Activity()
        self._slots: list[Slot] = [Slot(self._make_node(c)) for c in spec.children]
        self._intensity = RestartIntensity(spec.max_restarts, spec.within)
        self._rng = random.Random()
        self._lock = anyio.Lock()
        self._next_token = 0
        self._timers = 0  # backoff timers pending
        # Per incarnation:
        self._group: TaskGroup | None = None
        self._events: MemoryObjectSendStream[LoopEvent] | None = None
        self._events_recv: MemoryObjectReceiveStream[LoopEvent] | None = None
        self._hard_scope: anyio.CancelScope | None = None
        self._ended = anyio.Event()  # set when an incarnation ends (replaced at each start)

    @property
    def dead_letter_hook(self) -> DeadLetterHook | None:
        if self.spec.dead_letter is not None:
            return self.spec.dead_letter
        return self.parent.dead_letter_hook if self.parent is not None else None

    def _make_node(self, spec: ChildSpec[Any] | SupervisorSpec) -> Node:
        if isinstance(spec, SupervisorSpec):
            return Supervisor(spec, parent=self, activity=self._activity)
        return ActorCell(spec, self, self._activity)

    def transition(self, event: LifecycleEvent) -> None:
        self.state = next_state(self.state, event)

    # -- public API ------------------------------------------------------------------------

    @overload
    async def start_child(self, spec: ChildSpec[M]) -> ActorRef[M]: ...
    @overload
    async def start_child(self, spec: SupervisorSpec) -> Supervisor: ...
    async def start_child(self, spec: ChildSpec[Any] | SupervisorSpec) -> Any:
        """Add a child at the end and start it; return its ref (or the nested supervisor).

        Blocks until the child has started. Raises ``StartFailed`` if its start raised (it
        is not added), ``ValueError`` for a duplicate name, ``ActorStopped`` if this
        supervisor is not running.
        """
        async with self._lock:
            if self._group is None or self.state is not _S.RUNNING:
                raise ActorStopped(self.name, "is not running")
            if any(s.node.name == spec.name for s in self._slots):
                raise ValueError(f"{self.name!r} already has a child named {spec.name!r}")
            slot = Slot(self._make_node(spec))
            self._slots.append(slot)
            try:
                await self._start_slot(slot, None)
            except StartFailed:
                self._remove(slot)
                raise
        self._activity.poke()
        return slot.node.ref if isinstance(slot.node, ActorCell) else slot.node

    async def stop_child(self, name: str) -> None:
        """Stop a child gracefully (whatever its restart type) and remove it for good."""
        async with self._lock:
            slot = self._slot(name)
            await self._stop_slot(slot)
            self._remove(slot)
        self._activity.poke()

    def ref(self, path: str) -> ActorRef[Any]:
        """Ref of the actor child ``path`` (``"name"`` or ``"nested/.../name"``).

        Works before the child started (messages wait in its mailbox). Raises LookupError.
        """
        head, _, rest = path.partition("/")
        node = self._slot(head).node
        if rest:
            if not isinstance(node, Supervisor):
                raise LookupError(f"{head!r} in {self.name!r} is not a supervisor")
            return node.ref(rest)
        if not isinstance(node, ActorCell):
            raise LookupError(f"{head!r} in {self.name!r} is a supervisor, not an actor")
        return node.ref

    def child_supervisor(self, path: str) -> Supervisor:
        """The nested supervisor at ``path``. Raises LookupError."""
        head, _, rest = path.partition("/")
        node = self._slot(head).node
        if not isinstance(node, Supervisor):
            raise LookupError(f"{head!r} in {self.name!r} is not a supervisor")
        return node.child_supervisor(rest) if rest else node

    @property
    def children(self) -> list[str]:
        """Names of the current children, in start order."""
        return [s.node.name for s in self._slots]

    def request_stop(self) -> None:
        """Ask for a graceful stop of every child, in reverse order (never blocks)."""
        if self.state is _S.RUNNING:
            self.transition(_E.STOP)
        if self._events is not None:
            self._post(StopAll())
        scope, timeout = self._hard_scope, self.shutdown_timeout
        if scope is not None and timeout is not None:
            scope.deadline = min(scope.deadline, anyio.current_time() + timeout)

    async def stop(self) -> None:
        """Stop gracefully and wait until done (children in reverse order).

        A nested supervisor is stopped and removed through its parent (``stop_child``).
        Do not await this from one of its own actors' ``handle``: use ``request_stop``.
        """
        if self.parent is not None:
            await self.parent.stop_child(self.name)
            return
        if self.state in _LIVE:
            self.request_stop()
            await self._ended.wait()

    def is_idle(self) -> bool:
        """True if running with no pending work, and every child is idle (recursively)."""
        if self.state is not _S.RUNNING or self._lock.locked() or self._timers:
            return False
        if self._events_recv is not None and self._events_recv.statistics().current_buffer_used:
            return False
        return all(s.node.is_idle() for s in self._slots)

    async def wait_idle(self) -> None:
        """Block until :meth:`is_idle` (every actor asleep on an empty mailbox).

        Background tasks started in ``Actor.task_group`` are not considered.
        """
        await self._activity.wait_until(self.is_idle)

    def statistics(self) -> SupervisorStatistics:
        return SupervisorStatistics(
            name=self.name,
            state=self.state.value,
            strategy=self.spec.strategy.value,
            incarnation=self.incarnation,
            restarts=max(0, self.incarnation - 1),
            child_restarts=self.child_restarts,
            children=tuple(s.node.statistics() for s in self._slots),
        )

    # -- one incarnation ---------------------------------------------------------------------

    async def run_incarnation(
        self, on_started: Callable[[], None], cause: BaseException | None
    ) -> None:
        """Start the children, supervise until stopped; raise ``SupervisorEscalation``/
        ``StartFailed`` on failure. Same contract as ``ActorCell.run_incarnation``."""
        self.transition(_E.START)
        self.incarnation += 1
        self._intensity.reset()
        for slot in self._slots:  # children cut short by a cancellation last time
            if slot.node.state is _S.EXITED:
                slot.node.transition(_E.TERMINATE)
        self._ended = anyio.Event()
        send, recv = anyio.create_memory_object_stream[LoopEvent](math.inf)
        self._events, self._events_recv = send, recv
        try:
            with anyio.CancelScope() as self._hard_scope, send, recv:
                async with anyio.create_task_group() as group:
                    self._group = group
                    await self._start_all()
                    self.transition(_E.STARTED)
                    on_started()
                    await self._loop(recv)
                    group.cancel_scope.cancel()  # pending backoff timers
        except BaseException as exc:
            if is_fatal(exc):
                self.transition(_E.EXIT)
                raise
            self.transition(_E.CRASH)
            leaf = unwrap(exc)  # keeps its own __cause__ (the crash that escalated)
            if leaf is exc:
                raise
            raise leaf  # noqa: B904
        else:
            self.transition(_E.EXIT)
        finally:
            self._group = self._events = self._events_recv = self._hard_scope = None
            self._timers = 0
            self._ended.set()
            self._activity.poke()

    async def _start_all(self) -> None:
        for slot in list(self._slots):
            try:
                await self._start_slot(slot, None)
            except StartFailed:
                await self._stop_all()
                raise

    async def _loop(self, events: MemoryObjectReceiveStream[LoopEvent]) -> None:
        async for event in events:
            async with self._lock:
                if isinstance(event, StopAll):
                    await self._stop_all()
                    return
                if isinstance(event, ChildExit):
                    await self._on_exit(event)
                else:
                    self._timers -= 1
                    await self._restart_now(event.group, event.token, event.cause)
            self._activity.poke()

    def _post(self, event: LoopEvent) -> None:
        if self._events is not None:
            # Closed: the incarnation is over; nothing is left to act on the event.
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                self._events.send_nowait(event)

    # -- starting and stopping children -----------------------------------------------------

    async def _start_slot(self, slot: Slot, cause: BaseException | None) -> None:
        """Start one incarnation of ``slot``'s child; return once started.

        Raises ``StartFailed`` if it ended before it finished starting.
        """
        assert self._group is not None
        slot.generation += 1
        slot.stop_requested = False
        slot.done = anyio.Event()
        started = anyio.Event()
        failure: list[BaseException] = []
        self._group.start_soon(
            self._child_task, slot, slot.generation, started, failure, cause, name=slot.node.name
        )
        await started.wait()
        if failure:
            raise StartFailed(slot.node.name, failure[0])
        slot.started_at = anyio.current_time()

    async def _child_task(
        self,
        slot: Slot,
        generation: int,
        started: anyio.Event,
        failure: list[BaseException],
        cause: BaseException | None,
    ) -> None:
        done = slot.done
        assert done is not None
        exc: BaseException | None = None
        try:
            await slot.node.run_incarnation(started.set, cause)
        except BaseException as e:
            if is_fatal(e):
                done.set()
                if not started.is_set():
                    failure.append(ActorStopped(slot.node.name, "was cancelled while starting"))
                    started.set()
                raise
            exc = e
        done.set()
        if not started.is_set():  # a start failure goes to the starter, not to the loop
            failure.append(exc or ActorStopped(slot.node.name, "ended while starting"))
            started.set()
            return
        if slot.stop_requested and slot.generation == generation:
            if exc is not None:
                log.warning("child %r raised while stopping: %r", slot.node.name, exc)
            return
        if exc is not None:
            log.error("child %r of %r crashed", slot.node.name, self.name, exc_info=exc)
        self._post(ChildExit(slot, generation, exc))

    async def _stop_slot(self, slot: Slot) -> None:
        """Stop ``slot``'s child gracefully if it is live; wait for its task to end."""
        if slot.node.state in _LIVE and slot.done is not None:
            slot.stop_requested = True
            slot.node.request_stop()
            await slot.done.wait()

    async def _stop_all(self) -> None:
        """Stop every child in reverse start order; leave them STOPPED (mailboxes kept)."""
        for slot in reversed(self._slots):
            await self._stop_slot(slot)
        for slot in self._slots:
            slot.node.transition(_E.TERMINATE)

    def _remove(self, slot: Slot) -> None:
        """Forget a child that is not running: close its mailbox(es) for good."""
        if slot.node.state is not _S.STOPPED:
            slot.node.transition(_E.TERMINATE)
        self._slots.remove(slot)
        slot.node.close()

    def close(self) -> None:
        """Gone for good: close every descendant's mailbox (queued asks fail)."""
        if self.state is _S.EXITED:
            self.transition(_E.TERMINATE)
        for slot in self._slots:
            slot.node.close()

    def _slot(self, name: str) -> Slot:
        for slot in self._slots:
            if slot.node.name == name:
                return slot
        raise LookupError(f"{self.name!r} has no child named {name!r}")

    # -- restart policy ------------------------------------------------------------------------

    async def _on_exit(self, event: ChildExit) -> None:
        slot, exc = event.slot, event.exc
        if slot not in self._slots or slot.generation != event.generation:
            return  # stale: that incarnation was replaced or the child removed
        if slot.node.state is not _S.EXITED:
            return
        restart = slot.node.restart
        if restart is Restart.TEMPORARY or (restart is Restart.TRANSIENT and exc is None):
            self._remove(slot)
            node = slot.node
            if isinstance(node, Supervisor) and node.spec.on_exit is not None:
                node.spec.on_exit(exc)
            return
        if (lost := unrecoverable(exc)) is not None:
            await self._stop_all()  # a restart cannot fix it: give up now, not after N tries
            raise SupervisorGaveUp(self.name, lost)
        if self._intensity.record(anyio.current_time()):
            await self._stop_all()
            raise SupervisorEscalation(self.name, exc, self.spec.max_restarts, self.spec.within)
        group = restart_group(self.spec.strategy, self._slots, slot)
        for other in reversed(group):
            if other is not slot:
                await self._stop_slot(other)
        for other in group:
            if other is not slot and other.node.restart is Restart.TEMPORARY:
                self._remove(other)
        group = [s for s in group if s in self._slots]
        self._next_token += 1
        for other in group:
            other.restart_token = self._next_token
            other.node.transition(_E.RESTART)
        delay = slot.next_backoff(self.spec.backoff, anyio.current_time(), self._rng)
        if delay > 0:
            self._timers += 1
            self._group_start_timer(tuple(group), self._next_token, exc, delay)
        else:
            await self._restart_now(tuple(group), self._next_token, exc)

    def _group_start_timer(
        self, group: tuple[Slot, ...], token: int, cause: BaseException | None, delay: float
    ) -> None:
        async def timer() -> None:
            await anyio.sleep(delay)
            self._post(RestartDue(group, token, cause))

        assert self._group is not None
        self._group.start_soon(timer, name=f"backoff {group[0].node.name}")

    async def _restart_now(
        self, group: tuple[Slot, ...], token: int, cause: BaseException | None
    ) -> None:
        """Start the group's slots in order (those still owned by this restart)."""
        for slot in group:
            if slot not in self._slots or slot.restart_token != token:
                continue
            if slot.node.state is not _S.RESTARTING:
                continue
            self.child_restarts += 1
            try:
                await self._start_slot(slot, cause)
            except StartFailed as failed:
                log.error("restart of %r failed", slot.node.name, exc_info=failed.cause)
                self._post(ChildExit(slot, slot.generation, failed.cause))
                return
