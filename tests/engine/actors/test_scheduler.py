"""The scheduler actor's step loop: what leaves it, in which order."""

import anyio
import pytest

from actorllm.core.output_processor import OutputProcessor
from actorllm.core.sampling_params import SamplingParams
from actorllm.engine.actors.executor import ExecutorActor
from actorllm.testing.engine_harness import check_invariants, open_test_engine

pytestmark = pytest.mark.anyio


async def test_the_next_step_is_launched_before_this_steps_outputs_are_processed(monkeypatch):
    # Both records are made on the event loop: the order is the actors' order, not the
    # worker thread's timing.
    events: list[tuple[str, int]] = []
    submit, process = ExecutorActor._submit, OutputProcessor.process_outputs

    def record_submit(self, msg):
        events.append(("launch", msg.scheduler_output.step_id))
        return submit(self, msg)

    def record_process(self, eco):
        if eco.step_id >= 0:  # (replays are -1)
            events.append(("outputs", eco.step_id))
        return process(self, eco)

    monkeypatch.setattr(ExecutorActor, "_submit", record_submit)
    monkeypatch.setattr(OutputProcessor, "process_outputs", record_process)
    async with open_test_engine(step_delay_s=0.002) as engine:
        params = SamplingParams(max_tokens=8, ignore_eos=True)

        async def one(i: int) -> None:
            async for _ in engine.generate({"prompt_token_ids": [5 + i] * 20}, params):
                pass

        async with anyio.create_task_group() as tg:
            for i in range(4):
                tg.start_soon(one, i)
        await check_invariants(engine)
    launched = {step: i for i, (what, step) in enumerate(events) if what == "launch"}
    processed = {step: i for i, (what, step) in enumerate(events) if what == "outputs"}
    pairs = [(step, launched[step + 1]) for step in processed if step + 1 in launched]
    assert len(pairs) >= 7  # every request's 8 tokens took at least 8 steps
    # Step N+1 was on its way to the worker before the output processor took step N.
    assert all(at < processed[step] for step, at in pairs), events
