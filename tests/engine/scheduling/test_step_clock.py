"""``StepClock`` in virtual time: a started step past its deadline raises, a finished one
never does, a queued one is not timed, and a thread that stays stuck after a restart
raises after the recovery window."""

from __future__ import annotations

import anyio
import pytest

from actorllm.engine.scheduling.step_clock import StepClock, StepTimeout

pytestmark = pytest.mark.actorllm_mock_clock


async def test_a_started_step_past_its_deadline_raises(mock_clock: object) -> None:
    clock = StepClock(2.0, 20.0)
    clock.started(7)
    t0 = anyio.current_time()
    with pytest.raises(StepTimeout, match="model step 7 did not finish within 2s"):
        await clock.run()
    assert anyio.current_time() - t0 == pytest.approx(2.0)


async def test_finished_and_queued_steps_never_raise(mock_clock: object) -> None:
    clock = StepClock(2.0, 20.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(clock.run)
        for step_id in range(5):
            clock.started(step_id)
            await anyio.sleep(1.5)  # each within its 2 s
            clock.done(step_id)
        await anyio.sleep(60.0)  # idle (a step only queued is not started, not timed)
        tg.cancel_scope.cancel()


async def test_a_thread_stuck_after_a_restart_raises_after_the_recovery_window(
    mock_clock: object,
) -> None:
    clock = StepClock(2.0, 20.0)
    clock.waiting_for_thread()
    t0 = anyio.current_time()
    with pytest.raises(StepTimeout, match="still stuck"):
        await clock.run()
    assert anyio.current_time() - t0 == pytest.approx(20.0)
    clock = StepClock(2.0, 20.0)
    clock.waiting_for_thread()
    async with anyio.create_task_group() as tg:
        tg.start_soon(clock.run)
        await anyio.sleep(5.0)
        clock.thread_ready()  # back in time: no timeout
        await anyio.sleep(60.0)
        tg.cancel_scope.cancel()
