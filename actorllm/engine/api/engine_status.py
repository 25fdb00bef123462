"""``EngineStatus``: whether the engine still takes calls, the one piece of state that
``AsyncEngine``'s parts (its request API and its control plane) share.

Writers: ``AsyncEngine`` while it runs (``supervisor`` at start, ``close()`` at exit,
``die()`` when the actor tree escalated) and ``RequestAPI.drain`` (``close()``). Every
request and control call reads it first (:meth:`EngineStatus.check_open`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, final

import anyio

from actorllm.engine.errors import EngineClosedError, EngineDeadError

if TYPE_CHECKING:
    from actorllm.actors import Supervisor
    from actorllm.engine.actors.assembly import EngineParts, Replica

T = TypeVar("T")


@final
class EngineStatus:
    def __init__(self) -> None:
        self.dead: BaseException | None = None  # why the engine died; None: alive
        self.closing = False  # no new requests or control calls (drain, or shutdown)
        self.supervisor: Supervisor | None = None  # the actor tree's root, while it runs

    @property
    def is_dead(self) -> bool:
        return self.dead is not None

    def close(self) -> None:
        """Refuse new calls from now on (the open requests go on)."""
        self.closing = True

    def die(self, cause: BaseException) -> None:
        self.dead = cause

    def check_open(self) -> None:
        """Raise ``EngineDeadError`` when the engine died, ``EngineClosedError`` when it
        is shutting down (or draining)."""
        if self.dead is not None:
            raise EngineDeadError(f"the engine died: {self.dead}")
        if self.closing:
            raise EngineClosedError("the engine is shutting down")


def live_replicas(parts: EngineParts) -> list[Replica]:
    """The replicas that still take work, in replica order."""
    return [r for r in parts.replicas if r.index in parts.live]


async def ask_each(replicas: list[Replica], ask: Callable[[Replica], Awaitable[T]]) -> list[T]:
    """``await ask(replica)`` for every replica at once; the answers in replica order. The
    first error is raised once every replica has answered (none is left mid-call)."""
    if len(replicas) == 1:
        return [await ask(replicas[0])]
    results: list[Any] = [None] * len(replicas)
    errors: list[BaseException] = []

    async def one(i: int, replica: Replica) -> None:
        try:
            results[i] = await ask(replica)
        except Exception as exc:  # raised below, after every replica answered
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        for i, replica in enumerate(replicas):
            tg.start_soon(one, i, replica)
    if errors:
        raise errors[0]
    return results
