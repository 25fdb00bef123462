"""``open_supervisor``: the root of a supervision tree, as an async context manager."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.abc import TaskStatus

from actorllm.actors.errors import StartFailed, SupervisorEscalation
from actorllm.actors.policy import Backoff
from actorllm.actors.spec import ChildSpec, DeadLetterHook, Strategy, SupervisorSpec
from actorllm.actors.supervisor import Supervisor

# Exceptions raised bare out of open_supervisor rather than inside an exception group.
_UNWRAPPED = (SupervisorEscalation, StartFailed, KeyboardInterrupt, SystemExit)


@asynccontextmanager
async def open_supervisor(
    *,
    name: str = "root",
    strategy: Strategy = Strategy.ONE_FOR_ONE,
    children: Sequence[ChildSpec[Any] | SupervisorSpec] = (),
    max_restarts: int = 3,
    within: float = 5.0,
    backoff: Backoff | None = None,
    dead_letter: DeadLetterHook | None = None,
    shutdown_timeout: float | None = None,
) -> AsyncIterator[Supervisor]:
    """Run a root supervisor for the duration of the ``async with`` block.

    Entering starts ``children`` in order (raises ``StartFailed`` if one fails; the ones
    already started are stopped). Leaving stops every child gracefully, in reverse order,
    then closes every mailbox for good (queued asks fail with ``ActorStopped``). If the
    root exceeds its restart intensity, the block is cancelled and ``SupervisorEscalation``
    is raised (its ``cause`` is the last crash). If the enclosing scope is cancelled, the
    children are cancelled without a graceful stop.

    Example::

        async with open_supervisor(strategy=Strategy.ONE_FOR_ONE) as sup:
            ref = await sup.start_child(ChildSpec("counter", Counter))
            await ref.send(Add(n=1))
    """
    spec = ChildSpec.supervisor(
        name,
        strategy=strategy,
        children=children,
        max_restarts=max_restarts,
        within=within,
        backoff=backoff,
        dead_letter=dead_letter,
        shutdown_timeout=shutdown_timeout,
    )
    sup = Supervisor(spec, parent=None)
    body_error: BaseException | None = None
    try:
        async with anyio.create_task_group() as group:
            await group.start(_run_root, sup)
            try:
                yield sup
            except BaseException as exc:
                body_error = exc
                raise
            finally:
                await sup.stop()
    except BaseExceptionGroup as group_error:
        leaf = _single_leaf(group_error)
        if leaf is None or not (isinstance(leaf, _UNWRAPPED) or leaf is body_error):
            raise
        raise leaf from leaf.__cause__
    finally:
        sup.close()


async def _run_root(sup: Supervisor, *, task_status: TaskStatus[None]) -> None:
    await sup.run_incarnation(lambda: task_status.started(), None)


def _single_leaf(group: BaseExceptionGroup[Any]) -> BaseException | None:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        if len(exc.exceptions) != 1:
            return None
        exc = exc.exceptions[0]
    return exc
