"""The executor: hands steps to the worker thread and their results back to the scheduler.

It never runs torch itself and never waits for a step: ``ExecuteStep`` queues the step on
the dedicated worker thread and returns at once, so the next step can be queued behind it
(async scheduling). The thread posts each outcome to the loop. A step that succeeded goes
straight into the scheduler's mailbox as ``StepDone`` from that callback, when nothing is
queued ahead of it and the mailbox has room (no task switch on the hot path). Otherwise
the outcome goes into this incarnation's own result stream (unbounded, but never holding
more than the in-flight cap of steps: the scheduler launches no more), and a task of this
incarnation forwards it, waiting for room; a worker exception is re-raised there,
crashing the executor and, with it, the core subtree; so does a step still running after
``step_timeout_s`` (engine/scheduling/step_clock.py). Control calls (sleep, wake-up, collective_rpc,
profiling) are queued on the same thread, so they run between steps; their replies are
answered from the thread's callback, and an exception in one fails only that call.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections.abc import Callable
from typing import Any

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from actorllm.actors import Actor, ActorStopped, MailboxFull, Reply, Unrecoverable
from actorllm.core.lora import LoRARequest
from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.distributed.ray_connect import RayClusterError
from actorllm.engine.actors.context import EngineContext
from actorllm.engine.actors.messages import (
    CollectiveRPC,
    CommitWeights,
    ExecuteStep,
    ExecutorMsg,
    ReceiveWeights,
    SleepWorker,
    StartProfile,
    StepDone,
    StopProfile,
    WakeWorker,
)
from actorllm.engine.scheduling.step_clock import StepClock
from actorllm.worker.tp_errors import RankGroupError
from actorllm.worker.worker import ReplicaWorker
from actorllm.worker.worker_thread import LoopPoster, Outcome, WorkerThread

logger = logging.getLogger(__name__)

# (epoch, step id, outcome) of a step, posted by the worker thread.
_Result = tuple[int, int, Outcome[ModelRunnerOutput]]


class WorkerStepError(RuntimeError):
    """The model runner raised while executing a step."""


class ExecutorReport(msgspec.Struct, frozen=True, kw_only=True):
    results_buffered: int  # step outcomes posted by the worker, not yet forwarded
    worker_jobs_queued: int  # steps and control calls waiting on the worker thread


class ExecutorActor(Actor[ExecutorMsg]):
    def __init__(self, ctx: EngineContext, thread: WorkerThread, worker: ReplicaWorker) -> None:
        super().__init__()
        self.refs = ctx.refs
        self.ledger = ctx.ledger
        # Steps of an epoch below this were scheduled by a core incarnation before this one
        # (set in on_start; the core's scheduler starts after its executor and then begins
        # a newer epoch).
        self.first_epoch = 0
        timeout = ctx.config.step_timeout_s
        # The step timeout; a stuck thread gets ten timeouts to come back after a restart.
        self.clock = StepClock(timeout, 10 * timeout) if timeout is not None else None
        self.thread = thread
        self.worker = worker  # touched on the worker thread only
        self.loras = ctx.loras  # the adapters to pin again on the worker (a replaced one)
        self.poster: LoopPoster | None = None  # made on the loop, in on_start
        self.results: MemoryObjectSendStream[_Result] | None = None  # owner: this incarnation
        # Outcomes put in ``results`` and not yet in the scheduler's mailbox: while any is,
        # later ones queue behind it (the scheduler gets the steps in order).
        self.forwarding = 0
        self.open = False  # this incarnation takes outcomes (from on_start to on_stop)

    def report(self) -> ExecutorReport:
        buffered = self.results.statistics().current_buffer_used if self.results else 0
        return ExecutorReport(
            results_buffered=buffered, worker_jobs_queued=self.thread.statistics().queued
        )

    async def on_start(self) -> None:
        self.first_epoch = self.ledger.epoch + 1
        self.poster = LoopPoster()
        send, receive = anyio.create_memory_object_stream[_Result](math.inf)
        self.results = send
        self.open = True
        # A new core is starting: whatever per-request state the worker holds is stale.
        # Queued behind any step still running, ahead of every step of the new epoch. A
        # worker replaced meanwhile (the Ray backend's new host) has no adapter: the pinned
        # ones are pinned again before any step (a no-op for a worker that kept them).
        poster, clock, worker = self.poster, self.clock, self.worker
        pins = self.loras.pinned_requests()

        def reset() -> None:  # on the worker thread
            if clock is not None:
                poster.post(clock.thread_ready)  # the thread is back from older steps
            worker.reset_requests()
            if pins:
                _restore_pins(worker, pins)

        self.thread.submit(reset, functools.partial(_reset_done, send))
        self._watch_ranks(send)
        self.task_group.start_soon(self._forward, receive)
        if clock is not None:
            clock.waiting_for_thread()
            self.task_group.start_soon(clock.run)  # raises StepTimeout: a crash

    def _watch_ranks(self, results: MemoryObjectSendStream[_Result]) -> None:
        """Tensor parallel: a rank group that breaks while this incarnation runs crashes
        it (the core restarts; its reset job replaces the group); so does a remote
        worker's host (Ray backend). A group already broken when it started is being
        replaced by its own reset job: that report is ignored."""
        tp, poster = self.worker.watched(), self.poster
        if tp is None or poster is None:
            return
        start_gen, broken_at_start = tp.generation, tp.broken is not None

        def crash(generation: int, why: str) -> None:  # on the loop
            if generation < start_gen or (generation == start_gen and broken_at_start):
                return
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                results.send_nowait((-1, -1, Outcome(error=RankGroupError(why))))

        tp.notify = lambda generation, why: poster.post(crash, generation, why)

    async def on_stop(self) -> None:
        self.open = False
        if self.results is not None:
            self.results.close()  # outcomes still to come are dropped (stale or shut down)

    async def _forward(self, receive: MemoryObjectReceiveStream[_Result]) -> None:
        async with receive:
            async for epoch, step_id, outcome in receive:
                if self.clock is not None:
                    self.clock.done(step_id)
                if isinstance(outcome.error, Unrecoverable):
                    raise outcome.error  # the core gives up: see _reset_done
                if outcome.error is not None:
                    raise WorkerStepError(
                        f"model step {step_id} failed: {outcome.error!r}"
                    ) from outcome.error
                assert outcome.value is not None  # no error: the step produced its output
                await self.refs.scheduler.send(
                    StepDone(epoch=epoch, step_id=step_id, output=outcome.value)
                )
                self.forwarding -= 1

    async def handle(self, msg: ExecutorMsg) -> None:
        w = self.worker
        match msg:
            case ExecuteStep(epoch=epoch) if epoch < self.first_epoch:
                # Stale: queued in the mailbox while the core restarted. The worker's request
                # state was reset for the new epoch, so running it would fail on requests the
                # worker no longer knows; its scheduler is gone and nobody waits for it.
                logger.debug(
                    "executor: dropped step %d of old epoch %d", msg.scheduler_output.step_id, epoch
                )
            case ExecuteStep():
                self._submit(msg)
            case SleepWorker(level=level, tags=tags, reply=reply):
                self._call(reply, lambda: w.sleep_group(level, tags))
            case WakeWorker(tags=tags, reply=reply):
                self._call(reply, lambda: w.wake_up_group(tags))
            case CollectiveRPC(method=method, args=args, kwargs=kwargs, reply=reply):
                # One result per rank (tensor parallel: rank 0's first).
                self._call(reply, lambda: w.collective_rpc_group(method, args, kwargs))
            case ReceiveWeights(update_info=info, reply=reply):
                self.task_group.start_soon(self._receive_weights, info, reply.defer())
            case CommitWeights(reply=reply):
                self._call(reply, lambda: w.collective_rpc_group("finish_weight_update"))
            case StartProfile(reply=reply):
                self._call(reply, w.start_profile)
            case StopProfile(reply=reply):
                self._call(reply, w.stop_profile)

    async def _receive_weights(
        self, info: dict[str, Any] | list[dict[str, Any]], reply: Reply[int]
    ) -> None:
        """A weight update's tensors, received on every rank's receiving thread while the
        worker thread runs steps: start them (a control call between steps), wait for rank
        0's off the loop, then collect every rank's outcome (worker/weight_receiver.py)."""
        w = self.worker
        try:
            receipts = await self._on_thread(
                lambda: w.collective_rpc_group("receive_weights_begin", (info,))
            )
        except Exception as exc:
            with contextlib.suppress(Exception):  # ranks that did start: collect them
                await self._on_thread(lambda: w.collective_rpc_group("receive_weights_end"))
            reply.fail(exc)
            return
        try:
            if receipts and receipts[0] is not None:
                await anyio.to_thread.run_sync(receipts[0].wait, abandon_on_cancel=True)
            counts = await self._on_thread(lambda: w.collective_rpc_group("receive_weights_end"))
        except Exception as exc:
            reply.fail(exc)
            return
        reply.send(counts[0])

    async def _on_thread(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the worker thread (between steps) and wait for its result."""
        done = anyio.Event()
        box: list[Outcome[Any]] = []

        def answer(outcome: Outcome[Any]) -> None:  # on the loop
            box.append(outcome)
            done.set()

        self.thread.submit(fn, answer)
        await done.wait()
        if box[0].error is not None:
            raise box[0].error
        return box[0].value

    def _hand_over(self, epoch: int, step_id: int, outcome: Outcome[ModelRunnerOutput]) -> bool:
        """A successful step's ``StepDone`` straight into the scheduler's mailbox, on the
        loop, without the forwarding task; False when it must take that path instead (an
        error to raise, outcomes queued ahead, a full mailbox) or be dropped (this
        incarnation ended)."""
        if outcome.error is not None or self.forwarding or not self.open:
            return False
        assert outcome.value is not None  # no error: the step produced its output
        try:
            self.refs.scheduler.send_nowait(
                StepDone(epoch=epoch, step_id=step_id, output=outcome.value)
            )
        except (MailboxFull, ActorStopped):
            return False
        if self.clock is not None:
            self.clock.done(step_id)
        return True

    def _call(self, reply: Reply[Any], fn: Callable[[], Any]) -> None:
        """Queue ``fn`` on the worker thread (between steps); answer ``reply`` with its
        result or exception. The executor goes on meanwhile."""
        reply.defer()

        def answer(outcome: Outcome[Any]) -> None:  # on the loop
            if outcome.error is not None:
                reply.fail(outcome.error)
            else:
                reply.send(outcome.value)

        self.thread.submit(fn, answer)

    def _submit(self, msg: ExecuteStep) -> None:
        results, poster = self.results, self.poster
        assert results is not None and poster is not None  # on_start ran before any message
        epoch, so = msg.epoch, msg.scheduler_output

        def done(outcome: Outcome[ModelRunnerOutput]) -> None:  # runs on the event loop
            if self._hand_over(epoch, so.step_id, outcome):
                return
            # Closed: this incarnation ended (its epoch is stale) or the engine stopped.
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                results.send_nowait((epoch, so.step_id, outcome))
                self.forwarding += 1

        def post(outcome: Outcome[ModelRunnerOutput]) -> None:  # runs on the worker thread
            poster.post(done, outcome)  # never waits for the loop: the thread goes on

        clock, worker = self.clock, self.worker

        def run() -> None:  # on the worker thread
            if clock is not None:
                poster.post(clock.started, so.step_id)  # timed from now, not from queueing
            worker.execute_step(so, msg.connector_meta, post)

        # Launched ahead of the previous step's result when one is pending (async scheduling).
        self.thread.submit(run)


def _restore_pins(worker: ReplicaWorker, pins: list[LoRARequest]) -> None:
    """On the worker thread: pin ``pins`` again on every rank. An adapter that can no
    longer be read (its directory gone) is logged and left unpinned: its requests fail by
    name as they arrive, and the replica keeps serving the others."""
    try:
        worker.collective_rpc_group("restore_lora_pins", (pins,))
    except ValueError as exc:  # LoRAAdapterError, or every slot pinned
        logger.warning("LoRA pins not restored on the restarted worker: %s", exc)


def _reset_done(results: MemoryObjectSendStream[_Result], outcome: Outcome[Any]) -> None:
    """On the loop, after the reset job: a reset that failed crashes this incarnation. One
    that found no place for the replica's worker (the Ray cluster lost the hosts it needs
    and has no others, or the nodes lack the model) is :class:`Unrecoverable`: restarting
    cannot place it either, so the replica gives up at once (with data parallel its
    requests move to the live replicas; alone, the engine dies saying why)."""
    error = outcome.error
    if error is None:
        return
    if isinstance(error, RayClusterError):
        error = Unrecoverable(f"the replica's worker cannot be replaced: {error}", error)
    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
        results.send_nowait((-1, -1, Outcome(error=error)))
