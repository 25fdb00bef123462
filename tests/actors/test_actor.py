"""The Actor contract: hooks, background work, custom run(), siblings, fatal exceptions."""

from __future__ import annotations

import itertools
import time

import anyio
import msgspec
import pytest

from actorllm.actors import (
    TRANSITIONS,
    Actor,
    ActorState,
    ChildSpec,
    LifecycleEvent,
    Restart,
    Strategy,
    format_transitions,
    open_supervisor,
)
from actorllm.actors.cell import BACKLOG_RUN, BACKLOG_RUN_S
from actorllm.actors.lifecycle import LifecycleError, next_state

from .support import Add, Counter, get, until

pytestmark = pytest.mark.anyio


class Tick(msgspec.Struct, frozen=True):
    pass


class Ticker(Actor[Tick]):
    """Runs a background loop in its task group; a poisoned loop crashes the actor."""

    def __init__(self, journal: list[str], poison_at: int | None = None) -> None:
        self.journal = journal
        self.poison_at = poison_at
        self.ticks = 0
        self.wake = anyio.Event()

    async def on_start(self) -> None:
        self.task_group.start_soon(self._loop)

    async def _loop(self) -> None:
        try:
            while True:
                await self.wake.wait()
                self.wake = anyio.Event()
                self.ticks += 1
                if self.ticks == self.poison_at:
                    raise RuntimeError("background failure")
        finally:
            self.journal.append(f"loop-exit:{self.ticks}")

    async def handle(self, msg: Tick) -> None:
        self.wake.set()

    async def on_stop(self) -> None:
        self.journal.append(f"on_stop:{self.ticks}")


async def test_a_background_crash_is_a_crash_of_the_actor() -> None:
    journal: list[str] = []
    spec = ChildSpec("t", Ticker, kwargs={"journal": journal, "poison_at": 1})
    async with open_supervisor(children=[spec]) as sup:
        ref = sup.ref("t")
        await ref.send(Tick())
        await until(lambda: ref.statistics().crashes == 1)
        await sup.wait_idle()
        assert ref.statistics().incarnation == 2
        # The loop was cancelled by the crash, then on_stop ran as cleanup.
        assert journal[:2] == ["loop-exit:1", "on_stop:1"]


async def test_graceful_stop_runs_on_stop_while_background_work_is_alive() -> None:
    journal: list[str] = []
    async with open_supervisor(children=[ChildSpec("t", Ticker, kwargs={"journal": journal})]):
        pass
    assert journal == ["on_stop:0", "loop-exit:0"]


class Once(Actor[Add]):
    """A custom run(): handles one message then ends normally."""

    async def run(self) -> None:
        async for _msg in self.inbox:
            return


async def test_a_custom_run_that_returns_is_a_normal_exit() -> None:
    async with open_supervisor(
        children=[ChildSpec("once", Once, restart=Restart.TRANSIENT)]
    ) as sup:
        await sup.ref("once").send(Add(1))
        await until(lambda: sup.children == [])
        assert sup.statistics().state == "running"  # a normal exit is no failure


class Pair(Actor[Add]):
    """Forwards to a sibling found by name (the engine's scheduler ⇄ executor cycle)."""

    def __init__(self, peer: str) -> None:
        self.peer = peer

    async def handle(self, msg: Add) -> None:
        if msg.n > 0:
            await self.sibling(self.peer).send(Add(msg.n - 1))


async def test_siblings_find_each_other_and_refs_survive_restarts() -> None:
    core = ChildSpec.supervisor(
        "core",
        strategy=Strategy.ONE_FOR_ALL,
        children=[
            ChildSpec("ping", Pair, kwargs={"peer": "pong"}),
            ChildSpec("pong", Pair, kwargs={"peer": "ping"}),
        ],
    )
    async with open_supervisor(children=[core, ChildSpec("counter", Counter)]) as sup:
        ping = sup.ref("core/ping")
        await ping.send(Add(9))
        await sup.wait_idle()
        assert ping.statistics().handled + sup.ref("core/pong").statistics().handled == 10
        assert await get(sup.ref("counter")) == 0


class Raiser(Actor[Add]):
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    async def handle(self, msg: Add) -> None:
        raise self.exc


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, SystemExit])
async def test_keyboard_interrupt_and_system_exit_propagate(
    exc_type: type[BaseException], anyio_backend: str
) -> None:
    if anyio_backend == "asyncio" and exc_type is KeyboardInterrupt:
        pytest.skip("asyncio re-raises KeyboardInterrupt out of the event loop itself")
    with pytest.raises(exc_type):
        async with open_supervisor(children=[ChildSpec("r", Raiser, args=(exc_type(),))]) as sup:
            await sup.ref("r").send(Add(1))
            await anyio.sleep_forever()


async def test_outer_cancellation_cancels_the_tree_and_is_not_a_crash() -> None:
    journal: list[tuple[str, str]] = []
    with anyio.move_on_after(0.05) as scope:
        async with open_supervisor(
            children=[ChildSpec("c", Counter, kwargs={"journal": journal})]
        ) as sup:
            await sup.ref("c").send(Add(1))
            await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert journal == [("c", "start")]  # cancelled, not stopped gracefully nor restarted


def test_lifecycle_is_a_printable_table() -> None:
    assert next_state(ActorState.RUNNING, LifecycleEvent.CRASH) is ActorState.EXITED
    assert next_state(ActorState.EXITED, LifecycleEvent.RESTART) is ActorState.RESTARTING
    with pytest.raises(LifecycleError):
        next_state(ActorState.NEW, LifecycleEvent.CRASH)
    text = format_transitions()
    assert "RUNNING    --STOP--> STOPPING" in text
    assert len(text.splitlines()) == sum(len(m) for m in TRANSITIONS.values())


class Journal(Actor[Add]):
    """Appends each Add's n to a list the test holds (read without a message)."""

    def __init__(self, handled: list[int]) -> None:
        self.handled = handled

    async def handle(self, msg: Add) -> None:
        self.handled.append(msg.n)


async def _work_through_backlog(actor: type[Actor[Add]], total: int) -> tuple[list[int], list[int]]:
    """Queue ``total`` Adds before ``actor`` runs; returns how many it had handled each time
    another task ran while it worked through them, and the steps between those counts
    (from 0 to ``total``)."""
    handled: list[int] = []
    spec = ChildSpec("j", actor, args=(handled,), mailbox_size=2 * total)
    async with open_supervisor(children=[spec]) as sup:
        ref = sup.ref("j")
        seen: list[int] = []

        async def watch() -> None:
            while len(handled) < total:
                seen.append(len(handled))
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tg:
            for n in range(total):
                ref.send_nowait(Add(n))  # the backlog, before the actor runs again
            tg.start_soon(watch)
    assert handled == list(range(total))
    inside = sorted({k for k in seen if 0 < k < total})
    return inside, [b - a for a, b in itertools.pairwise([0, *inside, total])]


async def test_the_inbox_yields_within_a_backlog() -> None:
    """An actor with a backlog takes BACKLOG_RUN messages in a row, then lets the other
    tasks run (not one message per turn of the loop: under load a turn is an engine step)."""
    inside, steps = await _work_through_backlog(Journal, 10 * BACKLOG_RUN)
    # The other task saw the backlog being worked through, not only before and after: at
    # most one run of the actor between two of its turns (two when the loop ran the tasks
    # of one turn in the other order than those of the next), and a run is more than one
    # message.
    assert len(inside) >= 3, inside
    assert max(steps) <= 2 * BACKLOG_RUN, inside
    assert min(b - a for a, b in itertools.pairwise(inside)) > 1, inside


class SlowJournal(Actor[Add]):
    """A Journal whose messages each hold the thread past BACKLOG_RUN_S (no await)."""

    def __init__(self, handled: list[int]) -> None:
        self.handled = handled

    async def handle(self, msg: Add) -> None:
        time.sleep(1.5 * BACKLOG_RUN_S)
        self.handled.append(msg.n)


async def test_a_backlog_of_slow_messages_yields_after_each_run_of_time() -> None:
    """Messages that take long are not taken BACKLOG_RUN at a time: the run also ends once
    BACKLOG_RUN_S passed, so the other tasks wait at most about that long."""
    inside, steps = await _work_through_backlog(SlowJournal, 12)
    # A run is at most two slow messages (the second starts before the time is up); two
    # runs at most between two turns of the watcher (see the test above).
    assert max(steps) <= 4, inside


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_an_idle_actor_takes_a_message_in_one_task_step(anyio_backend: str) -> None:
    """No yield before the wait when the mailbox is empty: woken, handle, park again (the
    engine's actors take a few messages per model step; each extra task step is loop time)."""
    import trio

    handled: list[int] = []
    steps: list[str] = []

    class Steps(trio.abc.Instrument):
        def before_task_step(self, task: trio.lowlevel.Task) -> None:
            steps.append(task.name)

    spec = ChildSpec("journal", Journal, args=(handled,))
    async with open_supervisor(children=[spec]) as sup:
        ref = sup.ref("journal")
        await until(sup.is_idle)  # started and parked
        instrument = Steps()
        trio.lowlevel.add_instrument(instrument)
        try:
            for n in range(10):
                ref.send_nowait(Add(n))
                await until(lambda k=n + 1: len(handled) == k and sup.is_idle())
        finally:
            trio.lowlevel.remove_instrument(instrument)
    assert handled == list(range(10))
    assert sum(1 for name in steps if name.endswith("journal")) == 10, set(steps)
