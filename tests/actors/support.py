"""Messages and actors shared by the runtime's tests."""

from __future__ import annotations

import anyio
import msgspec

from actorllm.actors import Actor, Reply


class Add(msgspec.Struct, frozen=True):
    n: int


class Get(msgspec.Struct, frozen=True, kw_only=True):
    reply: Reply[int]


class Boom(msgspec.Struct, frozen=True):
    error: str = "boom"


class Wait(msgspec.Struct, frozen=True):
    """Block in handle() until the gate is set (an anyio.Event)."""

    gate: anyio.Event


class Quit(msgspec.Struct, frozen=True):
    """Ask the actor to end its incarnation normally (Actor.stop)."""


CounterMsg = Add | Get | Boom | Wait | Quit


class Counter(Actor[CounterMsg]):
    """Sums Adds; records its lifecycle into ``journal`` as ``(name, event)`` pairs."""

    def __init__(self, journal: list[tuple[str, str]] | None = None) -> None:
        self.total = 0
        self.journal = journal if journal is not None else []

    async def on_start(self) -> None:
        self.journal.append((self.name, "start"))

    async def on_restart(self, cause: BaseException | None) -> None:
        self.journal.append((self.name, f"restart:{type(cause).__name__}"))

    async def on_stop(self) -> None:
        self.journal.append((self.name, "stop"))

    async def handle(self, msg: CounterMsg) -> None:
        match msg:
            case Add(n=n):
                self.total += n
            case Get(reply=reply):
                reply.send(self.total)
            case Boom(error=error):
                raise ValueError(error)
            case Wait(gate=gate):
                await gate.wait()
            case Quit():
                self.stop()


async def get(ref: object) -> int:
    """The counter's total (via ask)."""
    return await ref.ask(lambda reply: Get(reply=reply), timeout=5.0)  # type: ignore[attr-defined,no-any-return]


async def until(predicate: object, *, limit: float = 5.0) -> None:
    """Poll ``predicate()`` (for state that wait_idle cannot see, e.g. outside tasks)."""
    with anyio.fail_after(limit):
        while not predicate():  # type: ignore[operator]
            await anyio.sleep(0.001)
