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


async def test_a_request_arriving_mid_step_joins_the_step_that_runs_next(monkeypatch):
    # The overlapping step is launched just before the running one ends (lookahead), not
    # when it starts: a request that arrives meanwhile is in it, as without overlap.
    from actorllm.engine.recovery.admission import Admission

    events: list[tuple[str, int | str]] = []
    submit, add, done = ExecutorActor._submit, Admission.add, Admission.step_done

    def record_submit(self, msg):
        so = msg.scheduler_output
        events.append(("launch", so.step_id))
        events.extend(("has", r.req_id) for r in so.scheduled_new_reqs)
        return submit(self, msg)

    def record_add(self, request):
        events.append(("add", request.request_id))
        return add(self, request)

    def record_done(self, epoch, step_id, output):
        events.append(("done", step_id))
        return done(self, epoch, step_id, output)

    monkeypatch.setattr(ExecutorActor, "_submit", record_submit)
    monkeypatch.setattr(Admission, "add", record_add)
    monkeypatch.setattr(Admission, "step_done", record_done)
    async with open_test_engine(step_delay_s=0.05) as engine:
        params = SamplingParams(max_tokens=14, ignore_eos=True)
        late: list[str] = []

        async def one(rid: str, first: int) -> None:
            async for out in engine.generate({"prompt_token_ids": [first] * 8}, params, rid):
                if rid == "a" and len(out.outputs[0].token_ids) == 8:
                    late.append("b")  # just after a step's result: the next step has begun
                    tg.start_soon(one, "b", 9)

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "a", 7)
        await check_invariants(engine)
    assert late == ["b"]
    arrival = next(i for i, e in enumerate(events) if e[0] == "add" and str(e[1]).endswith("b"))
    launched = [e[1] for e in events[:arrival] if e[0] == "launch"]
    finished = {e[1] for e in events[:arrival] if e[0] == "done"}
    running = [s for s in launched if s not in finished]
    assert len(running) == 1, events  # the overlapping step was not launched yet
    joined = next(e for e in events[arrival:] if e[0] == "has")
    first_step = max(e[1] for e in events[: events.index(joined)] if e[0] == "launch")
    assert first_step == running[0] + 1, events
