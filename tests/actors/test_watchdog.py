"""The per-message watchdog (``ChildSpec.message_deadline``): a handler that never returns
is cancelled, counted as a crash (``ActorHung``) and restarted; busy or idle actors are not."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from actorllm.actors import ActorCrashed, ActorHung, ChildSpec, attach_probe, open_supervisor
from actorllm.testing import wait_idle

from .support import Add, Counter, Get, Wait, get

pytestmark = pytest.mark.anyio


class Slow(Counter):
    """Each Add takes ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    async def handle(self, msg: Any) -> None:
        if isinstance(msg, Add):
            await anyio.sleep(self.delay)
        await super().handle(msg)


async def test_a_hung_handler_is_cancelled_dead_lettered_and_restarted() -> None:
    letters: list[tuple[str, object, BaseException]] = []
    spec = ChildSpec("c", Counter, message_deadline=0.1)
    async with open_supervisor(children=[spec], dead_letter=lambda *a: letters.append(a)) as sup:
        ref = sup.ref("c")
        await ref.send(Add(2))
        never = anyio.Event()
        with anyio.fail_after(5):
            with pytest.raises(ActorCrashed) as crashed:
                await ref.ask(lambda r: Wait(never), timeout=None)  # type: ignore[arg-type]
        assert isinstance(crashed.value.cause, ActorHung)
        await ref.send(Add(3))  # the restarted incarnation serves the mailbox
        assert await get(ref) == 3
        stats = ref.statistics()
        assert (stats.incarnation, stats.crashes, stats.hangs) == (2, 1, 1)
    [(name, msg, exc)] = letters
    assert name == "c" and isinstance(msg, Wait) and isinstance(exc, ActorHung)
    assert "Wait" in str(exc) and "0.1s" in str(exc)


async def test_a_busy_actor_within_its_deadline_is_left_alone() -> None:
    # Ten messages of 30 ms each: 300 ms of work, each well under the 100 ms deadline.
    async with open_supervisor(
        children=[ChildSpec("c", Slow, args=(0.03,), message_deadline=0.1)]
    ) as sup:
        ref = sup.ref("c")
        for _ in range(10):
            await ref.send(Add(1))
        assert await get(ref) == 10
        await anyio.sleep(0.25)  # idle longer than the deadline: nothing is held
        assert await get(ref) == 10
        assert ref.statistics().incarnation == 1 and ref.statistics().hangs == 0


async def test_without_a_deadline_a_slow_handler_is_never_interrupted() -> None:
    async with open_supervisor(children=[ChildSpec("c", Slow, args=(0.2,))]) as sup:
        ref = sup.ref("c")
        await ref.send(Add(1))
        assert await get(ref) == 1
        await wait_idle(sup)
        assert ref.statistics().incarnation == 1


@pytest.mark.actorllm_mock_clock
async def test_the_deadline_runs_in_virtual_time(mock_clock: object) -> None:
    async with open_supervisor(children=[ChildSpec("c", Counter, message_deadline=30.0)]) as sup:
        ref = sup.ref("c")
        t0 = anyio.current_time()
        await ref.send(Wait(anyio.Event()))
        await ref.send(Add(1))
        # After the restart: 30 virtual seconds, no real ones (get()'s 5 s timeout would
        # jump first).
        assert await ref.ask(lambda r: Get(reply=r), timeout=None) == 1
        assert anyio.current_time() - t0 == pytest.approx(30.0)
        assert ref.statistics().hangs == 1


def test_the_deadline_must_be_positive() -> None:
    with pytest.raises(ValueError, match="message_deadline"):
        ChildSpec("c", Counter, message_deadline=0)


async def test_a_probe_can_stall_an_actor_and_the_watchdog_restarts_it() -> None:
    """A probe returning an awaitable holds the message (a hang on purpose, for chaos)."""
    stalls: list[float] = []

    def hang_once(name: str, msg: object) -> Any:
        if isinstance(msg, Add) and msg.n == 7 and not stalls:
            stalls.append(anyio.current_time())
            return anyio.sleep_forever()
        return None

    async with open_supervisor(children=[ChildSpec("c", Counter, message_deadline=0.1)]) as sup:
        ref = sup.ref("c")
        attach_probe(ref, hang_once)
        await ref.send(Add(7))  # stalls, hangs, is dead-lettered by the restart
        await ref.send(Add(1))
        assert await get(ref) == 1
        assert ref.statistics().hangs == 1 and len(stalls) == 1


async def test_a_probe_stall_that_ends_just_delays_the_message() -> None:
    async with open_supervisor(children=[ChildSpec("c", Counter)]) as sup:
        ref = sup.ref("c")
        attach_probe(ref, lambda name, msg: anyio.sleep(0.05) if isinstance(msg, Add) else None)
        t0 = anyio.current_time()
        await ref.send(Add(2))
        assert await get(ref) == 2
        assert anyio.current_time() - t0 >= 0.05
        assert ref.statistics().crashes == 0
