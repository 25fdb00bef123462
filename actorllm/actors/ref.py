"""``ActorRef``: the address of a supervised actor's mailbox (not of an instance).

A ref stays valid across restarts; messages sent while the actor restarts wait in its
mailbox. Sending to a child that was stopped for good raises ``ActorStopped``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar, final

import anyio

from actorllm.actors.errors import MailboxFull
from actorllm.actors.reply import Reply, new_reply

if TYPE_CHECKING:
    from actorllm.actors.cell import ActorCell, ActorStatistics
    from actorllm.actors.lifecycle import ActorState

M = TypeVar("M")
T = TypeVar("T")


@final
class ActorRef(Generic[M]):
    """Send to an actor. Created by its supervisor (``start_child``, ``Supervisor.ref``)."""

    __slots__ = ("_cell", "_mailbox", "name")

    def __init__(self, cell: ActorCell[M]) -> None:
        self._cell = cell
        self._mailbox = cell.mailbox
        self.name = cell.name

    async def send(self, msg: M, *, checkpoint: bool = True) -> None:
        """Enqueue ``msg``; waits while the mailbox is full (backpressure).

        A checkpoint, unless ``checkpoint=False`` and the mailbox has room: then the message
        is enqueued without a yield (a hot path that sends on every request or step saves a
        turn of the event loop per send; under load a turn is a whole engine step). Raises
        ``ActorStopped`` if the actor is gone for good.
        """
        if not checkpoint:
            try:
                self._mailbox.put_nowait(msg, None)
                return
            except MailboxFull:
                pass  # no room: wait for it, as a plain send does
        await self._mailbox.put(msg, None)

    def send_nowait(self, msg: M) -> None:
        """Enqueue ``msg`` now; raises ``MailboxFull`` when full, ``ActorStopped`` if gone."""
        self._mailbox.put_nowait(msg, None)

    # ASYNC109: a per-call deadline on ask() is the documented API (anyio.fail_after inside).
    async def ask(self, make: Callable[[Reply[T]], M], *, timeout: float | None = None) -> T:  # noqa: ASYNC109
        """Send ``make(reply)`` and wait for the actor to answer the reply.

        ``timeout`` (seconds) covers waiting for mailbox room and for the answer; on expiry
        raises ``TimeoutError`` and the reply is abandoned (a late answer is dropped).
        Raises what the actor passed to ``reply.fail``, ``ActorCrashed`` if it crashed
        holding the message, ``NoReply`` if it returned without answering, ``ActorStopped``
        if it stopped before answering.

        Example: ``total = await ref.ask(lambda reply: Get(reply=reply), timeout=1.0)``
        """
        reply: Reply[T] = new_reply()
        msg = make(reply)
        if timeout is None:
            await self._mailbox.put(msg, reply)
            return await reply._wait()
        with anyio.fail_after(timeout):
            await self._mailbox.put(msg, reply)
            return await reply._wait()

    @property
    def state(self) -> ActorState:
        return self._cell.state

    def statistics(self) -> ActorStatistics:
        return self._cell.statistics()

    def __repr__(self) -> str:
        return f"<ActorRef {self.name!r} {self._cell.state.name}>"
