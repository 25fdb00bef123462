"""The executor hands each step's outcome to the scheduler: straight from the worker
thread's loop callback while the scheduler's mailbox has room, else through its forwarding
task, which waits for room. Either way the scheduler gets every step once, in order."""

import anyio
import pytest

from actorllm.actors import MailboxFull
from actorllm.core.sampling_params import SamplingParams
from actorllm.engine.actors.executor import ExecutorActor
from actorllm.engine.actors.messages import GrammarReady
from actorllm.engine.recovery.admission import Admission
from actorllm.testing.engine_harness import check_invariants, open_test_engine

pytestmark = pytest.mark.anyio

HAND_OVER, STEP_DONE = ExecutorActor._hand_over, Admission.step_done


async def _run(
    monkeypatch, *, crowd: bool, async_scheduling: bool
) -> tuple[list[list[int]], dict[str, int], list[int]]:
    """24 requests of 6 tokens; ``crowd``: mailboxes of 4, and every other step comes
    back to a full scheduler mailbox (filled with no-op messages just before the
    hand-over). Otherwise the mailboxes are large enough that the 24 requests' own
    messages never fill the scheduler's, so every hand-over is direct."""
    paths = {"direct": 0, "forwarded": 0}
    done_steps: list[int] = []

    def record_hand_over(self, epoch, step_id, outcome):
        if crowd and step_id % 2:
            try:
                while True:
                    self.refs.scheduler.send_nowait(GrammarReady())  # (a no-op there)
            except MailboxFull:
                pass
        direct = HAND_OVER(self, epoch, step_id, outcome)
        paths["direct" if direct else "forwarded"] += 1
        return direct

    def record_step_done(self, epoch, step_id, output):
        done_steps.append(step_id)
        return STEP_DONE(self, epoch, step_id, output)

    monkeypatch.setattr(ExecutorActor, "_hand_over", record_hand_over)
    monkeypatch.setattr(Admission, "step_done", record_step_done)
    tokens: list[list[int]] = [[] for _ in range(24)]
    async with open_test_engine(
        mailbox_size=4 if crowd else 1024, async_scheduling=async_scheduling
    ) as engine:
        params = SamplingParams(max_tokens=6, ignore_eos=True)

        async def one(i: int) -> None:
            prompt = {"prompt_token_ids": [7 + i] * (8 + i)}
            async for out in engine.generate(prompt, params, request_id=f"r{i}"):
                tokens[i] = list(out.outputs[0].token_ids)  # (cumulative)

        async with anyio.create_task_group() as tg:
            for i in range(len(tokens)):
                tg.start_soon(one, i)
        await check_invariants(engine)
    return tokens, paths, done_steps


@pytest.mark.parametrize("async_scheduling", [False, True])
async def test_outcomes_reach_the_scheduler_in_order_by_either_path(monkeypatch, async_scheduling):
    # (async scheduling: two steps in flight, the second may come back behind a forwarded one)
    tokens, paths, done_steps = await _run(
        monkeypatch, crowd=True, async_scheduling=async_scheduling
    )
    assert paths["forwarded"], paths
    assert done_steps == sorted(set(done_steps)), done_steps  # each step once, in order
    roomy, roomy_paths, roomy_steps = await _run(
        monkeypatch, crowd=False, async_scheduling=async_scheduling
    )
    assert roomy_paths["direct"] and not roomy_paths["forwarded"], roomy_paths
    assert roomy_steps == sorted(set(roomy_steps)), roomy_steps
    assert tokens == roomy and all(len(t) == 6 for t in tokens)


async def test_a_worker_that_cannot_be_replaced_ends_a_lone_replica_at_once(monkeypatch):
    """The reset job of the restarted core fails for want of room (a lost Ray host, no
    other): no futile restarts, the engine dies at once saying why."""
    from actorllm.distributed.ray_connect import RayClusterError
    from actorllm.engine.errors import EngineDeadError
    from actorllm.testing import inject_fault

    resets: list[int] = []

    def no_room() -> None:
        resets.append(1)
        raise RayClusterError("the model's worker needs 1 bundle(s): no capacity is left")

    params = SamplingParams(max_tokens=8, ignore_eos=True)
    with pytest.raises(EngineDeadError, match=r"gave up: .*no capacity is left"):
        async with open_test_engine() as engine:
            monkeypatch.setattr(engine._parts.replicas[0].worker, "reset_requests", no_room)
            inject_fault(engine, "worker", at_step=1)
            async for _ in engine.generate({"prompt_token_ids": [5] * 8}, params):
                pass
    assert resets == [1]
