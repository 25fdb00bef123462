"""The ``Actor`` base class: one message at a time, plus background work tied to its life.

Theory of operation: a supervisor builds a fresh instance with the child's factory at every
(re)start, binds it to the child's persistent cell (mailbox, ref, counters) and runs::

    on_restart(cause)        # only when this is not the first incarnation
    on_start()               # the child counts as started once this returns
    run()                    # default: for each message in the mailbox, await handle(msg)
    on_stop()                # after run() returns (graceful stop or normal exit)

``run``, ``handle``, ``on_start`` and ``on_stop`` all execute inside the incarnation's
task group, :attr:`Actor.task_group`: start background work there (a step loop, a wait on
a worker thread). An exception escaping any of them — or any background task — is a crash
of the actor: the incarnation's task group is cancelled, ``on_stop`` runs as cleanup
(bounded by ``shutdown_timeout``), and the supervisor applies its restart policy.

On a graceful stop the actor finishes the message in hand, ``run`` returns, ``on_stop``
runs while background tasks are still alive (so it can drain them), then they are
cancelled. On external cancellation everything is cancelled and ``on_stop`` does not run:
put must-run cleanup in ``finally`` blocks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from actorllm.actors.cell import ActorCell, ActorStatistics, Inbox
    from actorllm.actors.ref import ActorRef
    from actorllm.actors.supervisor import Supervisor

M = TypeVar("M")


class Actor(Generic[M]):
    """Subclass and implement :meth:`handle` (and/or override :meth:`run`).

    Example::

        class Counter(Actor[Add | Get]):
            def __init__(self) -> None:
                self.total = 0

            async def handle(self, msg: Add | Get) -> None:
                match msg:
                    case Add(n=n):
                        self.total += n
                    case Get(reply=reply):
                        reply.send(self.total)

    The runtime attributes (:attr:`name`, :attr:`ref`, :attr:`inbox`, :attr:`task_group`,
    :attr:`supervisor`) are available from ``on_restart``/``on_start`` on, not in
    ``__init__``.
    """

    _cell: ActorCell[M] | None = None

    # -- hooks (override) -------------------------------------------------------------------

    async def on_start(self) -> None:
        """Set up; the supervisor waits for this before starting the next sibling.

        Raising here is a failed start (``StartFailed`` for ``start_child``/
        ``open_supervisor``; a crash to be retried when restarting).
        """

    async def on_restart(self, cause: BaseException | None) -> None:
        """Called on the fresh instance before ``on_start`` when this is a restart.

        ``cause`` is the exception that made the supervisor restart this child's group (it
        may be a sibling's, under ONE_FOR_ALL / REST_FOR_ONE), or None if a permanent
        child had exited normally.
        """

    async def on_stop(self) -> None:
        """Tear down. Runs after ``run`` returns, and as cleanup after a crash."""

    def report(self) -> Any:
        """This actor's own state for :meth:`statistics` (``ActorStatistics.report``): a
        small frozen struct (queue lengths, what is in flight), or None. Must not block."""
        return None

    async def handle(self, msg: M) -> None:
        """Handle one message. The default ``run`` never calls it concurrently."""
        raise NotImplementedError(f"{type(self).__name__} must implement handle() or run()")

    async def run(self) -> None:
        """The incarnation's main loop. Returning ends the incarnation normally.

        The default reads the mailbox until a stop is requested. An override that reads
        messages must do it through ``async for msg in self.inbox`` so that the runtime
        knows which message is in hand (for dead letters and reply checks).
        """
        async for msg in self.inbox:
            await self.handle(msg)

    # -- runtime services -------------------------------------------------------------------

    @property
    def _bound(self) -> ActorCell[M]:
        if self._cell is None:
            raise RuntimeError("actor runtime attributes are available from on_start on")
        return self._cell

    @property
    def name(self) -> str:
        return self._bound.name

    @property
    def ref(self) -> ActorRef[M]:
        """This actor's own ref (valid across restarts)."""
        return self._bound.ref

    @property
    def inbox(self) -> Inbox[M]:
        """Async iterator over this actor's messages; ends when a stop is requested."""
        return self._bound.inbox

    @property
    def task_group(self) -> TaskGroup:
        """Task group of this incarnation: background work that lives and dies with it."""
        group = self._bound.task_group
        if group is None:
            raise RuntimeError("the actor's task group exists only while it runs")
        return group

    @property
    def supervisor(self) -> Supervisor:
        """The parent supervisor: look up siblings with ``self.supervisor.ref(name)``."""
        return self._bound.supervisor

    @property
    def stopping(self) -> bool:
        """True once a stop was requested (custom ``run`` loops should return soon)."""
        return self._bound.stopping

    def sibling(self, name: str) -> ActorRef[Any]:
        """Ref of a sibling actor, or of a descendant with a ``"core/scheduler"`` path."""
        return self._bound.supervisor.ref(name)

    def stop(self) -> None:
        """End this incarnation normally after the current message (never blocks).

        A PERMANENT child is restarted; TRANSIENT and TEMPORARY ones are removed.
        """
        self._bound.request_stop(self_requested=True)

    def statistics(self) -> ActorStatistics:
        return self._bound.statistics()

    def _bind(self, cell: ActorCell[M]) -> None:
        self._cell = cell
