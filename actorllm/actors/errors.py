"""Exceptions of the actor runtime, and the one helper that reads anyio's exception groups.

Every error the runtime raises on purpose derives from :class:`ActorError`, except
:class:`SupervisorEscalation`, which is also an ``ActorError`` but is the one a root
supervisor raises out of ``open_supervisor`` when it gives up.
"""

from __future__ import annotations

import anyio


class ActorError(Exception):
    """Base class of the runtime's own errors."""


class MailboxFull(ActorError):
    """``send_nowait`` found the mailbox at capacity; nothing was enqueued."""

    def __init__(self, name: str, capacity: int) -> None:
        super().__init__(f"mailbox of {name!r} is full ({capacity} messages)")
        self.name = name
        self.capacity = capacity


class ActorStopped(ActorError):
    """The actor stopped for good (or stopped before answering): the message cannot be served."""

    def __init__(self, name: str, detail: str = "has stopped") -> None:
        super().__init__(f"actor {name!r} {detail}")
        self.name = name


class ActorCrashed(ActorError):
    """The actor crashed while it held the message an ``ask`` is waiting on.

    ``__cause__`` (and :attr:`cause`) is the exception that crashed it.
    """

    def __init__(self, name: str, cause: BaseException) -> None:
        super().__init__(f"actor {name!r} crashed: {cause!r}")
        self.name = name
        self.cause = cause
        self.__cause__ = cause


class ActorHung(ActorError):
    """The actor held one message longer than its ``ChildSpec.message_deadline``.

    The watchdog raises it inside the incarnation, which is then a crash like any other:
    the message is dead-lettered (with this error), an ``ask`` on it fails with
    ``ActorCrashed``, and the supervisor restarts the actor by its policy.
    """

    def __init__(self, name: str, deadline: float, msg: object) -> None:
        super().__init__(
            f"actor {name!r} held {type(msg).__name__} for more than {deadline:g}s "
            "(its message deadline); restarting it"
        )
        self.name = name
        self.deadline = deadline


class NoReply(ActorError):
    """``handle`` returned without answering (or deferring) the message's :class:`Reply`."""

    def __init__(self, name: str, msg: object) -> None:
        super().__init__(
            f"actor {name!r} finished handling {type(msg).__name__} without answering its "
            "reply; call reply.send()/reply.fail(), or reply.defer() to answer later"
        )
        self.name = name


class StartFailed(ActorError):
    """A child raised before it finished starting (``on_restart``/``on_start``)."""

    def __init__(self, name: str, cause: BaseException) -> None:
        super().__init__(f"child {name!r} failed to start: {cause!r}")
        self.name = name
        self.cause = cause
        self.__cause__ = cause


class SupervisorEscalation(ActorError):
    """A supervisor exceeded its restart intensity, stopped its children and gave up.

    Raised into the parent supervisor (which treats it as that child's crash) and, at the
    root, out of ``open_supervisor``. :attr:`cause` is the crash that broke the limit.
    """

    def __init__(self, name: str, cause: BaseException | None, restarts: int, within: float):
        super().__init__(
            f"supervisor {name!r} exceeded {restarts} restarts within {within:g}s; "
            f"last cause: {cause!r}"
        )
        self.name = name
        self.cause = cause
        self.__cause__ = cause


def is_fatal(exc: BaseException) -> bool:
    """True if ``exc`` must propagate untouched: cancellation, KeyboardInterrupt, SystemExit.

    For an exception group, true if any leaf is such an exception.
    """
    if isinstance(exc, BaseExceptionGroup):
        return any(is_fatal(e) for e in exc.exceptions)
    return isinstance(exc, KeyboardInterrupt | SystemExit | anyio.get_cancelled_exc_class())


def unwrap(exc: BaseException) -> BaseException:
    """The single leaf of a (nested) exception group, or ``exc`` itself.

    anyio 4 task groups always wrap errors in groups; an actor crash is easier to read,
    retry and match on as the one exception that actually happened.
    """
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


class Unrecoverable(ActorError):
    """Raised by an actor whose failure no restart can fix (what it needs is gone, e.g.
    the hosts its worker ran on): its supervisor does not restart it but gives up at once
    (:class:`SupervisorGaveUp`), as when its restart intensity is exceeded, and so does
    every supervisor that the escalation reaches and would restart. :attr:`cause`: why."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause
        self.__cause__ = cause


class SupervisorGaveUp(SupervisorEscalation):
    """A supervisor stopped its children and gave up because one failed
    :class:`Unrecoverable` (:attr:`cause`)."""

    def __init__(self, name: str, cause: Unrecoverable) -> None:
        ActorError.__init__(self, f"supervisor {name!r} gave up: {cause}")
        self.name = name
        self.cause = cause
        self.restarts, self.within = 0, 0.0
        self.__cause__ = cause


def unrecoverable(exc: BaseException | None) -> Unrecoverable | None:
    """The :class:`Unrecoverable` failure ``exc`` is or carries up (a give-up), if any."""
    exc = unwrap(exc) if exc is not None else None
    if isinstance(exc, Unrecoverable):
        return exc
    if isinstance(exc, SupervisorGaveUp):
        return exc.cause if isinstance(exc.cause, Unrecoverable) else None
    return None
