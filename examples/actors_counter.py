"""A supervised counter: asks, a crash that loses nothing queued, and statistics.

python examples/actors_counter.py            # trio
python examples/actors_counter.py asyncio
"""

from __future__ import annotations

import logging
import sys

import anyio
import anyio.lowlevel
import msgspec

from actorllm.actors import (
    Actor,
    ActorCrashed,
    ChildSpec,
    Reply,
    Restart,
    Strategy,
    open_supervisor,
)


class Add(msgspec.Struct, frozen=True):
    n: int


class Get(msgspec.Struct, frozen=True, kw_only=True):
    reply: Reply[int]


class Divide(msgspec.Struct, frozen=True, kw_only=True):
    by: int
    reply: Reply[float]


CounterMsg = Add | Get | Divide


class Counter(Actor[CounterMsg]):
    def __init__(self) -> None:
        self.total = 0

    async def on_restart(self, cause: BaseException | None) -> None:
        print(f"  [{self.name}] restarted after {cause!r}; total starts again at 0")

    async def handle(self, msg: CounterMsg) -> None:
        match msg:
            case Add(n=n):
                self.total += n
            case Get(reply=reply):
                reply.send(self.total)
            case Divide(by=by, reply=reply):
                reply.send(self.total / by)  # by=0 crashes the actor: a bug we survive


def dead_letter(name: str, msg: object, exc: BaseException) -> None:
    print(f"  dead letter from {name!r}: {msg!r} ({type(exc).__name__})")


async def main() -> None:
    async with open_supervisor(
        strategy=Strategy.ONE_FOR_ONE, max_restarts=3, within=5.0, dead_letter=dead_letter
    ) as sup:
        ref = await sup.start_child(
            ChildSpec("counter", Counter, restart=Restart.PERMANENT, mailbox_size=64)
        )
        for n in range(1, 11):
            await ref.send(Add(n))  # waits if the mailbox is full (backpressure)
        total = await ref.ask(lambda reply: Get(reply=reply), timeout=1.0)
        print(f"sum of 1..10 = {total}")
        print(f"half of it   = {await ref.ask(lambda r: Divide(by=2, reply=r), timeout=1.0)}")

        # A crash, with Add(5) sent right behind the bad message.
        async with anyio.create_task_group() as tg:

            async def divide_by_zero() -> None:
                try:
                    await ref.ask(lambda r: Divide(by=0, reply=r), timeout=1.0)
                except ActorCrashed as exc:
                    print(f"ask failed cleanly: {type(exc.cause).__name__}")

            sent = ref.statistics().mailbox.sent
            tg.start_soon(divide_by_zero)
            while ref.statistics().mailbox.sent == sent:
                await anyio.lowlevel.checkpoint()
            await ref.send(Add(5))
        await sup.wait_idle()
        total = await ref.ask(lambda r: Get(reply=r))
        print(f"after the restart, total = {total} (Add(5) was not lost)")
        stats = ref.statistics()
        print(
            f"incarnation={stats.incarnation} handled={stats.handled} crashes={stats.crashes} "
            f"peak mailbox depth={stats.mailbox.peak_depth}"
        )


if __name__ == "__main__":
    # The runtime logs each crash with its traceback; this demo prints its own account.
    logging.getLogger("actorllm.actors").setLevel(logging.CRITICAL)
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "trio")
