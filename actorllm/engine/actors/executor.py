"""The executor: hands steps to the worker thread and their results back to the scheduler.

It never runs torch itself and never waits for a step: ``ExecuteStep`` queues the step on
the dedicated worker thread and returns at once, so the next step can be queued behind it
(async scheduling). The thread posts a ``WorkerResult`` into this actor's own mailbox; a
worker exception is re-raised here, crashing the executor and, with it, the core subtree.
"""

from __future__ import annotations

import contextlib

from actorllm.actors import Actor, ActorStopped
from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.scheduler_output import SchedulerOutput
from actorllm.engine.context import EngineContext
from actorllm.engine.messages import ExecuteStep, ExecutorCall, ExecutorMsg, StepDone, WorkerResult
from actorllm.worker.worker_thread import LoopPoster, Outcome


class WorkerStepError(RuntimeError):
    """The model runner raised while executing a step."""


class ExecutorActor(Actor[ExecutorMsg]):
    def __init__(self, ctx: EngineContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.poster: LoopPoster | None = None  # made on the loop, in on_start

    async def on_start(self) -> None:
        self.poster = LoopPoster()
        # A new core is starting: whatever per-request state the runner holds is stale.
        # Queued behind any step still running, ahead of every step of the new epoch.
        runner, pipeline = self.ctx.runner, self.ctx.pipeline

        def reset() -> None:
            pipeline.flush()
            runner.reset_requests()

        self.ctx.worker.submit(reset)

    async def handle(self, msg: ExecutorMsg) -> None:
        self.ctx.maybe_fault("executor", msg)
        match msg:
            case ExecuteStep(epoch=epoch, scheduler_output=so, connector_meta=meta):
                self._submit(epoch, so, meta)
            case WorkerResult(epoch=epoch) if epoch != self.ctx.core_epoch:
                return  # a step of a core that has since been rebuilt
            case WorkerResult(error=error) if error is not None:
                raise WorkerStepError(f"model step {msg.step_id} failed: {error!r}") from error
            case WorkerResult(epoch=epoch, step_id=step_id, output=output):
                assert output is not None  # no error: the step produced its output
                await self.ctx.ref("scheduler").send(
                    StepDone(epoch=epoch, step_id=step_id, output=output)
                )
            case ExecutorCall(method=method, args=args, reply=reply):
                runner, pipeline = self.ctx.runner, self.ctx.pipeline

                def call() -> object:
                    pipeline.flush()  # no step may be pending under a control call
                    return getattr(runner, method)(*args)

                reply.send(await self.ctx.worker.call(call))

    def _submit(self, epoch: int, so: SchedulerOutput, meta: object) -> None:
        runner, store, pipeline = self.ctx.runner, self.ctx.kv_offload_store, self.ctx.pipeline
        me = self.ctx.ref("executor")
        poster = self.poster
        assert poster is not None  # on_start ran before any message

        def done(outcome: Outcome[ModelRunnerOutput]) -> None:  # runs on the event loop
            result = WorkerResult(
                epoch=epoch, step_id=so.step_id, output=outcome.value, error=outcome.error
            )
            # Never full: it holds at most a few steps' results and control calls.
            with contextlib.suppress(ActorStopped):  # the engine stopped: nobody to tell
                me.send_nowait(result)

        def post(outcome: Outcome[ModelRunnerOutput]) -> None:  # runs on the worker thread
            poster.post(done, outcome)  # never waits for the loop: the thread goes on

        def before() -> None:
            if meta is not None and store is not None:
                store.apply(runner, meta)  # saves first, then loads, before the forward

        # Launched ahead of the previous step's result when one is pending (async scheduling).
        self.ctx.worker.submit(lambda: pipeline.run_step(so, post, before))
