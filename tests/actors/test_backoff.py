"""Restart backoff and intensity windows, in virtual time (trio MockClock, autojump)."""

from __future__ import annotations

import random

import anyio
import pytest

from actorllm.actors import (
    ActorState,
    Backoff,
    ChildSpec,
    Strategy,
    SupervisorEscalation,
    open_supervisor,
)
from actorllm.actors.policy import RestartIntensity, restart_group
from actorllm.testing import inject_fault, wait_idle

from .support import Add, Boom, Counter, get


class Clocked(Counter):
    """Records the (virtual) time of each start."""

    async def on_start(self) -> None:
        self.journal.append((self.name, f"{anyio.current_time():.3f}"))

    async def on_stop(self) -> None:
        pass

    async def on_restart(self, cause: BaseException | None) -> None:
        pass


def start_times(journal: list[tuple[str, str]]) -> list[float]:
    return [float(t) for _, t in journal]


@pytest.mark.actorllm_mock_clock
async def test_restarts_back_off_exponentially_then_reset_after_quiet(mock_clock: object) -> None:
    journal: list[tuple[str, str]] = []
    backoff = Backoff(initial=1.0, multiplier=2.0, maximum=3.0, jitter=0.0, reset_after=60.0)
    spec = ChildSpec("c", Clocked, kwargs={"journal": journal})
    async with open_supervisor(
        max_restarts=10, within=1000.0, backoff=backoff, children=[spec]
    ) as sup:
        ref = sup.ref("c")
        t0 = anyio.current_time()
        for _ in range(4):
            await ref.send(Boom())
            await wait_idle(sup)
        deltas = [round(t - t0, 3) for t in start_times(journal)]
        assert deltas == [0.0, 1.0, 3.0, 6.0, 9.0]  # 1, 2, then capped at 3 (twice)
        await anyio.sleep(60.0)  # quiet for reset_after: the next delay is `initial` again
        await ref.send(Boom())
        await wait_idle(sup)
        assert round(start_times(journal)[-1] - t0, 3) == 9.0 + 60.0 + 1.0


@pytest.mark.actorllm_mock_clock
async def test_messages_wait_in_the_mailbox_during_backoff() -> None:
    spec = ChildSpec("c", Counter)
    async with open_supervisor(backoff=Backoff(initial=5.0, jitter=0.0), children=[spec]) as sup:
        ref = sup.ref("c")
        await ref.send(Boom())
        await ref.send(Add(2))
        await anyio.sleep(1.0)
        assert ref.state is ActorState.RESTARTING
        assert ref.statistics().mailbox.depth == 1
        assert await get(ref) == 2  # served by the restarted incarnation
        assert anyio.current_time() >= 5.0


@pytest.mark.actorllm_mock_clock
async def test_stop_during_backoff_is_prompt() -> None:
    async with open_supervisor(
        backoff=Backoff(initial=100.0, maximum=100.0, jitter=0.0),
        children=[ChildSpec("c", Counter)],
    ) as sup:
        await sup.ref("c").send(Boom())
        await anyio.sleep(1.0)
        t0 = anyio.current_time()
    assert anyio.current_time() - t0 < 1.0
    assert sup.ref("c").state is ActorState.STOPPED


@pytest.mark.actorllm_mock_clock
async def test_intensity_window_slides() -> None:
    """Two restarts per 10 s are tolerated forever; a third inside the window escalates."""
    with pytest.raises(SupervisorEscalation):
        async with open_supervisor(
            max_restarts=2, within=10.0, children=[ChildSpec("c", Counter)]
        ) as sup:
            ref = sup.ref("c")
            fault = inject_fault(ref, ValueError, times=100)
            for _ in range(6):
                await ref.send(Add(1))
                await wait_idle(sup)
                await anyio.sleep(5.1)
            assert fault.fired == 6
            await ref.send(Add(1))
            await ref.send(Add(1))
            await ref.send(Add(1))
            await anyio.sleep_forever()


def test_policy_pieces() -> None:
    window = RestartIntensity(max_restarts=2, within=10.0)
    assert [window.record(t) for t in (0.0, 1.0, 2.0)] == [False, False, True]
    window.reset()
    assert [window.record(t) for t in (0.0, 6.0, 10.5, 16.5)] == [False, False, False, False]
    assert restart_group(Strategy.ONE_FOR_ONE, "abc", "b") == ["b"]
    assert restart_group(Strategy.ONE_FOR_ALL, "abc", "b") == ["a", "b", "c"]
    assert restart_group(Strategy.REST_FOR_ONE, "abc", "b") == ["b", "c"]
    rng = random.Random(0)
    jittered = Backoff(initial=1.0, jitter=0.5)
    delays = [jittered.delay(0, rng) for _ in range(200)]
    assert 0.5 <= min(delays) < 0.6 and 1.4 < max(delays) <= 1.5
    with pytest.raises(ValueError):
        Backoff(initial=2.0, maximum=1.0)
