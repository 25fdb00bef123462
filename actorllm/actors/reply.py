"""One-shot replies for request/reply messages (``ActorRef.ask``).

Theory of operation: ``ask`` creates a :class:`Reply`, builds the message around it and
waits. The actor answers with :meth:`Reply.send` or :meth:`Reply.fail`. The runtime makes
sure the asker never hangs on an actor that has moved on:

* ``handle`` returns and the reply is still open and not deferred → it fails with
  :class:`~actorllm.actors.errors.NoReply`;
* the actor crashes while it holds the message → it fails with ``ActorCrashed``;
* the actor kept it with :meth:`Reply.defer` and its incarnation ends before answering →
  ``ActorCrashed`` (crash) or ``ActorStopped`` (stop);
* the message is still queued when the actor stops for good → ``ActorStopped``.

Answering a reply whose asker went away (timeout, cancellation) is allowed and ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar, final

import anyio

T = TypeVar("T")

# _CLOSED: the asker stopped waiting, or the runtime failed the reply on the actor's behalf;
# a later answer is dropped quietly (send/fail return False).
_OPEN, _ANSWERED, _CLOSED = 0, 1, 2


@final
class Reply(Generic[T]):
    """The answer slot of one ``ask``. Only the runtime creates them.

    Example (inside an actor)::

        async def handle(self, msg: CounterMsg) -> None:
            match msg:
                case Get(reply=reply):
                    reply.send(self.total)
    """

    __slots__ = ("_deferred", "_error", "_event", "_on_done", "_state", "_value")

    def __init__(self, _token: object) -> None:
        if _token is not _CREATE:
            raise TypeError("Reply objects are created by ActorRef.ask(), not directly")
        self._event = anyio.Event()
        self._state = _OPEN
        self._deferred = False
        self._value: T | None = None
        self._error: BaseException | None = None
        # Called once when answered; the runtime uses it to forget a deferred reply.
        self._on_done: Callable[[Reply[T]], None] | None = None

    def __repr__(self) -> str:
        state = {_OPEN: "open", _ANSWERED: "answered", _CLOSED: "closed"}[self._state]
        return f"<Reply {state}{' deferred' if self._deferred else ''}>"

    @property
    def done(self) -> bool:
        """True once answered (or failed) — or once the asker stopped waiting."""
        return self._state != _OPEN

    @property
    def deferred(self) -> bool:
        return self._deferred

    def send(self, value: T) -> bool:
        """Answer with ``value``. Never blocks.

        Returns False if the asker already gave up or the runtime already failed the reply
        (the value is dropped). Raises ``RuntimeError`` if it was already answered.
        """
        return self._settle(value, None)

    def fail(self, exc: BaseException) -> bool:
        """Make the asker's ``ask`` raise ``exc``. Same return and errors as :meth:`send`."""
        return self._settle(None, exc)

    def defer(self) -> Reply[T]:
        """Keep this reply past the end of ``handle`` (answer it later, from any task).

        Without this, a reply left open when ``handle`` returns fails with ``NoReply``.
        A deferred reply still fails if the actor's incarnation ends before answering it.
        Returns ``self`` so it can be stored in one line:
        ``self.pending[msg.id] = msg.reply.defer()``.
        """
        self._deferred = True
        return self

    def _settle(self, value: T | None, error: BaseException | None) -> bool:
        if self._state == _ANSWERED:
            raise RuntimeError("this reply was already answered")
        if self._state == _CLOSED:
            self._done()
            return False
        self._state = _ANSWERED
        self._value, self._error = value, error
        self._event.set()
        self._done()
        return True

    def _done(self) -> None:
        if self._on_done is not None:
            callback, self._on_done = self._on_done, None
            callback(self)

    def _fail_if_open(self, exc: BaseException) -> None:
        """Runtime: fail the asker if nobody answered; a later answer is then dropped."""
        if self._state == _OPEN:
            self._error = exc
            self._state = _CLOSED
            self._event.set()
            self._done()

    async def _wait(self) -> T:
        """Asker side: block until answered; return the value or raise the error.

        Cancellation (including an ``ask`` timeout) abandons the reply.
        """
        try:
            await self._event.wait()
        except BaseException:
            if self._state == _OPEN:
                self._state = _CLOSED
            raise
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


_CREATE = object()


def new_reply() -> Reply[T]:
    """Runtime-only constructor."""
    return Reply(_CREATE)
