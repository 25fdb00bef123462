"""The worker-thread step pipeline: launch-ahead on a device, no hold-back on CPU."""

from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.scheduler_output import GrammarBitmask, SchedulerOutput
from actorllm.worker.runner import FinishedStep
from actorllm.worker.step_pipeline import StepPipeline


class DeviceLikeRunner:
    """launch() returns at once; a step is done only once the next one is launched or its
    result is waited for (like a GPU queue)."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.launched: list[FakePending] = []

    def launch(self, so: SchedulerOutput) -> "FakePending":
        self.events.append(f"launch {so.step_id}")
        for earlier in self.launched:
            earlier.finished = True  # the device ran it while this one was queued
        pending = FakePending(self, so.step_id)
        self.launched.append(pending)
        return pending


class FakePending:
    def __init__(self, runner: DeviceLikeRunner, step_id: int) -> None:
        self.runner, self.step_id, self.finished = runner, step_id, False

    def done(self) -> bool:
        return self.finished

    def result(self) -> ModelRunnerOutput:
        self.runner.events.append(f"result {self.step_id}")
        return ModelRunnerOutput(step_id=self.step_id, req_ids=[], sampled_token_ids=[])


class CpuRunner:
    """launch() computes the step (the CPU path, the ScriptedModel): its handle is done."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def launch(self, so: SchedulerOutput) -> FinishedStep:
        self.events.append(f"execute {so.step_id}")
        return FinishedStep(ModelRunnerOutput(step_id=so.step_id, req_ids=[], sampled_token_ids=[]))


def run(pipeline: StepPipeline, step_ids: list[int], posted: list[int]) -> None:
    for step_id in step_ids:
        pipeline.run_step(
            SchedulerOutput.empty(step_id), lambda outcome: posted.append(outcome.unwrap().step_id)
        )


def test_a_queued_step_is_launched_before_the_previous_result_is_read():
    runner = DeviceLikeRunner()
    queued = iter([True, True, False])  # step 1 and 2 are queued behind 0; nothing after 2
    pipeline = StepPipeline(runner, lambda: next(queued))
    posted: list[int] = []
    run(pipeline, [0, 1, 2], posted)
    assert runner.events == ["launch 0", "launch 1", "result 0", "launch 2", "result 1", "result 2"]
    assert posted == [0, 1, 2] and pipeline.max_pending_seen == 2


def test_a_step_whose_bitmask_waits_for_earlier_tokens_posts_them_first():
    """Structured outputs under async scheduling: step 1's bitmask is filled only once the
    scheduler has step 0's tokens, so step 0 is posted before step 1 is launched."""
    import msgspec

    runner = DeviceLikeRunner()
    pipeline = StepPipeline(runner, lambda: True)
    posted: list[int] = []
    pipeline.run_step(SchedulerOutput.empty(0), lambda o: posted.append(o.unwrap().step_id))
    assert posted == []  # held back: a step is queued behind it
    mask = GrammarBitmask(req_ids=["r"], bitmask=None, waits_for_inflight=True)
    so = msgspec.structs.replace(SchedulerOutput.empty(1), grammar_bitmask=mask)
    pipeline.run_step(so, lambda o: posted.append(o.unwrap().step_id))
    assert runner.events[:3] == ["launch 0", "result 0", "launch 1"] and posted[0] == 0


def test_nothing_is_held_back_when_no_step_is_queued():
    runner = DeviceLikeRunner()
    pipeline = StepPipeline(runner, lambda: False)
    posted: list[int] = []
    run(pipeline, [0, 1], posted)
    assert runner.events == ["launch 0", "result 0", "launch 1", "result 1"]
    assert pipeline.max_pending_seen == 1


def test_a_runner_that_computes_at_launch_posts_each_result_at_once():
    runner = CpuRunner()
    pipeline = StepPipeline(runner, lambda: True)  # even with more steps queued
    posted: list[int] = []
    run(pipeline, [0, 1, 2], posted)
    assert posted == [0, 1, 2] and pipeline.max_pending_seen == 1


def test_errors_are_posted_in_order_after_the_pending_steps():
    class Failing(DeviceLikeRunner):
        def launch(self, so):
            if so.step_id == 1:
                raise RuntimeError("boom")
            return super().launch(so)

    runner = Failing()
    pipeline = StepPipeline(runner, lambda: True)
    outcomes: list[object] = []
    for step_id in (0, 1):
        pipeline.run_step(SchedulerOutput.empty(step_id), outcomes.append)
    assert [o.value.step_id if o.error is None else "error" for o in outcomes] == [0, "error"]


class StageRunner:
    """Pipeline parallel's last stage: a step is ready once the previous stage's hidden
    states arrive (``arrive`` marks them), not when the next step launches."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.launched: dict[int, FakePending] = {}

    def launch(self, so: SchedulerOutput) -> FakePending:
        self.events.append(f"launch {so.step_id}")
        self.launched[so.step_id] = FakePending(self, so.step_id)  # type: ignore[arg-type]
        return self.launched[so.step_id]


def test_pipelined_waits_for_the_oldest_or_the_next_job_and_keeps_depth_pending():
    """depth 2: with nothing queued, step 0 is waited for; when step 1 is queued meanwhile
    the wait ends and step 1 is launched first (the stages overlap); then, two pending,
    step 0 is resolved, and step 1 is waited for until its hidden states arrive."""
    runner = StageRunner()
    polls = [0]

    def has_queued_jobs() -> bool:
        polls[0] += 1
        if polls[0] == 3 and 1 not in runner.launched:
            return True  # step 1 arrives while step 0 is in the earlier stage
        if polls[0] > 5 and 1 in runner.launched:
            runner.launched[1].finished = True  # its hidden states arrive
        return False

    pipeline = StepPipeline(runner, has_queued_jobs, depth=2)  # type: ignore[arg-type]
    posted: list[int] = []
    run(pipeline, [0], posted)
    assert runner.events == ["launch 0"] and posted == []  # returned to launch step 1
    run(pipeline, [1], posted)
    assert runner.events == ["launch 0", "launch 1", "result 0", "result 1"]
    assert posted == [0, 1] and pipeline.max_pending_seen == 2
