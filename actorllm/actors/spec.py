"""What to run and how to restart it: ``ChildSpec``, ``SupervisorSpec`` and their enums.

Specs are frozen data: a supervisor keeps them and calls ``factory(*args, **kwargs)`` anew at
every (re)start, so an actor instance never carries state across a crash. Anything that
must survive (refs to siblings, shared ledgers) is passed in through ``args``/``kwargs``.

Example — the engine's core, a one-for-all pair inside a one-for-one root::

    core = ChildSpec.supervisor(
        "core",
        strategy=Strategy.ONE_FOR_ALL,
        children=[ChildSpec("scheduler", Scheduler), ChildSpec("executor", Executor)],
    )
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from actorllm.actors.policy import Backoff

if TYPE_CHECKING:
    from actorllm.actors.actor import Actor

M = TypeVar("M")

DeadLetterHook = Callable[[str, object, BaseException], Iterable[object] | None]
"""``hook(child_name, message, exc)``: called for a message the actor held when it crashed
(``exc`` is the crash), whose handling was cut short by a stop (``ActorStopped``), or that
was still queued when the child stopped for good (``ActorStopped``). Runs synchronously in
the runtime and must not block. It may return messages to *redeliver*: they go to the
front of the same mailbox, in order, ahead of everything queued, for the next incarnation
(ignored once the mailbox is closed for good). Return None or ``()`` to drop the message.
A redelivered message carries no reply (an ``ask``'s reply has already failed)."""


ExitHook = Callable[[BaseException | None], None]
"""``hook(exc)``: a nested supervisor ended by itself (``exc``: the escalation that ended it,
None when it stopped normally) and its parent removed it for good instead of restarting
it (``Restart.TEMPORARY``, or ``TRANSIENT`` ending normally); not called for a stop asked
through ``stop_child`` or the parent's own stop. Runs synchronously in the parent's
supervision loop and must not block; an exception it raises is the parent's own crash (the
parent stops its children and escalates it), e.g. when the last of several replicas is
gone."""


class Restart(enum.Enum):
    """When a child that ended is started again (Erlang's restart types)."""

    PERMANENT = "permanent"  # always
    TRANSIENT = "transient"  # only after an abnormal exit (an exception)
    TEMPORARY = "temporary"  # never; the child is removed when it ends


class Strategy(enum.Enum):
    """Which children a supervisor restarts when one of them must be restarted."""

    ONE_FOR_ONE = "one_for_one"  # only that child
    ONE_FOR_ALL = "one_for_all"  # every child (stopped in reverse, started in order)
    REST_FOR_ONE = "rest_for_one"  # that child and every child started after it


def _check_name(name: str) -> None:
    if not name or "/" in name:
        raise ValueError(f"child names must be non-empty and contain no '/': {name!r}")


def _check_timeout(timeout: float | None) -> None:
    if timeout is not None and timeout < 0:
        raise ValueError(f"shutdown_timeout must be >= 0 or None, got {timeout!r}")


@dataclass(frozen=True)
class ChildSpec(Generic[M]):
    """One supervised actor: ``factory(*args, **kwargs)`` builds a fresh instance per start.

    ``mailbox_size`` bounds the mailbox (``send`` waits, ``send_nowait`` raises when full).
    ``shutdown_timeout`` is how long a graceful stop may take (finish the current message,
    run ``on_stop``) before the actor is cancelled; None waits forever.
    ``dead_letter`` overrides the supervisor's hook for this child.
    ``message_deadline`` arms a watchdog: an incarnation that holds one message longer
    than this many seconds (a handler that never returns) is cancelled and counts as a
    crash with :class:`~actorllm.actors.errors.ActorHung`. It measures from the moment the
    message is taken until the next one is asked for, awaits included (a send blocked on
    a full mailbox counts), so set it well above the slowest legitimate handling. A
    handler that blocks the event loop itself (synchronous code that never yields) cannot
    be interrupted by any watchdog in that loop. None (the default): no watchdog.
    """

    name: str
    factory: Callable[..., Actor[M]]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    _: KW_ONLY
    restart: Restart = Restart.PERMANENT
    mailbox_size: int = 64
    shutdown_timeout: float | None = 5.0
    dead_letter: DeadLetterHook | None = None
    message_deadline: float | None = None

    def __post_init__(self) -> None:
        _check_name(self.name)
        _check_timeout(self.shutdown_timeout)
        if not (isinstance(self.mailbox_size, int) and self.mailbox_size >= 1):
            raise ValueError(f"mailbox_size must be an int >= 1, got {self.mailbox_size!r}")
        if self.message_deadline is not None and not self.message_deadline > 0:
            raise ValueError(f"message_deadline must be > 0 or None, got {self.message_deadline!r}")

    @staticmethod
    def supervisor(
        name: str,
        *,
        strategy: Strategy = Strategy.ONE_FOR_ONE,
        children: Sequence[ChildSpec[Any] | SupervisorSpec] = (),
        max_restarts: int = 3,
        within: float = 5.0,
        backoff: Backoff | None = None,
        restart: Restart = Restart.PERMANENT,
        shutdown_timeout: float | None = None,
        dead_letter: DeadLetterHook | None = None,
        on_exit: ExitHook | None = None,
    ) -> SupervisorSpec:
        """A nested supervisor as a child (sugar for :class:`SupervisorSpec`)."""
        return SupervisorSpec(
            name,
            strategy=strategy,
            children=tuple(children),
            max_restarts=max_restarts,
            within=within,
            backoff=backoff,
            restart=restart,
            shutdown_timeout=shutdown_timeout,
            dead_letter=dead_letter,
            on_exit=on_exit,
        )


@dataclass(frozen=True)
class SupervisorSpec:
    """A supervisor: its children (started in order, stopped in reverse) and restart policy.

    More than ``max_restarts`` restarts within ``within`` seconds stops every child and
    escalates (:class:`~actorllm.actors.errors.SupervisorEscalation`) to the parent.
    ``backoff`` delays restarts (None: restart at once). ``shutdown_timeout`` None (the
    default) lets the children's own timeouts bound a graceful stop. ``dead_letter`` is
    inherited by children (and nested supervisors) that set none. ``on_exit`` is called when
    this supervisor ended and its parent will not start it again (see :data:`ExitHook`).
    """

    name: str
    _: KW_ONLY
    strategy: Strategy = Strategy.ONE_FOR_ONE
    children: Sequence[ChildSpec[Any] | SupervisorSpec] = ()
    max_restarts: int = 3
    within: float = 5.0
    backoff: Backoff | None = None
    restart: Restart = Restart.PERMANENT
    shutdown_timeout: float | None = None
    dead_letter: DeadLetterHook | None = None
    on_exit: ExitHook | None = None

    def __post_init__(self) -> None:
        _check_name(self.name)
        _check_timeout(self.shutdown_timeout)
        if self.max_restarts < 0 or self.within <= 0:
            raise ValueError("max_restarts must be >= 0 and within > 0")
        names = [c.name for c in self.children]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate child names in {self.name!r}: {names}")
