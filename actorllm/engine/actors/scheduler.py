"""The scheduler actor: a switchboard over :class:`~actorllm.engine.recovery.admission.Admission`.

The step loop is event-driven: after every message the actor launches steps while
``Admission.next_step`` gives one (under the in-flight cap). Under async scheduling the
second step in flight, the one that overlaps the step running, waits until that step is
predicted to be nearly done (engine/scheduling/lookahead.py), so that requests arriving
meanwhile join it; the incarnation's one background task is the timer that then sends
``LaunchDue``.

This is the per-step scheduling hook: a step leaves here as ``ExecuteStep`` and comes back
as ``StepDone``; its outputs go on to the output processor. A step launched on that result
is launched before they are sent on, and one yield between the two lets the executor hand
it to the worker before the output processor is woken, so the worker computes it while the
output processor works on them (in the other order the worker waits for the output
processor, which costs an overhead-bound run about 5 % of its throughput). Sends do not
yield when the mailbox has room: that one yield is the step's only task switch here.

Deadlock rule: the scheduler waits for room in the executor's mailbox (which holds at most
the in-flight cap of steps plus control calls) and in the output processor's. Nobody on a
path back to the scheduler blocks on the scheduler's mailbox while the scheduler waits on
them: the executor hands results over without waiting (from a loop callback, or from its
own task when the mailbox is full), and the output processor sends stop-string aborts
without blocking (or from a background task).
"""

from __future__ import annotations

import contextlib
import math

import anyio
import msgspec
from anyio.lowlevel import checkpoint

from actorllm.actors import Actor, MailboxFull, Reply
from actorllm.engine.actors.context import EngineContext
from actorllm.engine.actors.messages import (
    AbortRequest,
    AddRequest,
    AdoptRequests,
    AwaitPaused,
    CommitWeights,
    EndRequest,
    ExecuteStep,
    FinishWeightUpdate,
    GetStats,
    GetWeightVersion,
    GrammarReady,
    IsKVConnectorEnabled,
    IsPaused,
    IsSleeping,
    LaunchDue,
    PauseGeneration,
    PinLoRAs,
    ReleaseKVCache,
    ResetPrefixCache,
    ResumeGeneration,
    SchedulerMsg,
    SetKVConnector,
    SetWeightVersion,
    Sleep,
    SleepWorker,
    StepDone,
    StepOutputs,
    StopChildren,
    WakeUp,
    WakeWorker,
)
from actorllm.engine.errors import InvalidRequestError
from actorllm.engine.recovery.admission import Admission, AdmissionStatistics, Failure
from actorllm.engine.scheduling.lookahead import Lookahead
from actorllm.worker.sleep_tags import KV_CACHE


class SchedulerReport(msgspec.Struct, frozen=True, kw_only=True):
    admission: AdmissionStatistics  # steps in flight, probation, held, sleep level, epoch
    sleep_waiters: int  # sleep calls waiting for the steps in flight to drain
    pause_waiters: int  # pause calls waiting for the pause to complete
    lookahead_early: int  # overlapping steps launched while their predecessor ran
    lookahead_late: int  # ... put off, then launched on its result (its end came early)


class SchedulerActor(Actor[SchedulerMsg]):
    def __init__(self, ctx: EngineContext) -> None:
        super().__init__()
        self.refs = ctx.refs
        self.admission: Admission = ctx.admission
        # The waiting-queue bound reads the running set the admission publishes: kept up to
        # date after each message only when that bound is configured (O(running) each).
        self.publish_running = ctx.config.max_waiting_requests is not None
        # Sleep calls waiting for the steps in flight to drain. Owner: this incarnation
        # (deferred replies fail with it).
        self.sleep_waiters: list[tuple[int, Reply[None]]] = []
        # Pause calls waiting for the pause to complete: (clear_cache, reply). Owner: this
        # incarnation (a crash fails them; the control plane asks again, and the new
        # incarnation, still paused, answers at once).
        self.pause_waiters: list[tuple[bool, Reply[None]]] = []
        # Async scheduling: the overlapping step is launched just before the one running
        # ends (engine/scheduling/lookahead.py), by this incarnation's timer task. Not with
        # pipeline parallelism, where the steps in flight run on different stages at once.
        overlap = self.admission.inflight.cap == 2 and ctx.config.pipeline_parallel_size == 1
        self.lookahead = Lookahead() if overlap else None
        self._due: float | None = None  # when the timer sends LaunchDue
        self._due_moved: anyio.Event | None = None  # wakes the timer; from on_start on

    def report(self) -> SchedulerReport:
        return SchedulerReport(
            admission=self.admission.statistics(),
            sleep_waiters=len(self.sleep_waiters),
            pause_waiters=len(self.pause_waiters),
            lookahead_early=self.lookahead.early if self.lookahead else 0,
            lookahead_late=self.lookahead.late if self.lookahead else 0,
        )

    async def on_start(self) -> None:
        if self.lookahead is not None:
            self._due_moved = anyio.Event()
            self.task_group.start_soon(self._timer)
        await self._end(self.admission.restart())
        await self._pump()
        if self.publish_running:
            self.admission.publish()

    async def handle(self, msg: SchedulerMsg) -> None:
        adm = self.admission
        match msg:
            case AddRequest(request=request):
                failure = adm.add(request)
                await self._end([failure] if failure is not None else [])
            case AbortRequest(request_id=rid, child_ids=ids, status=status):
                adm.abort(rid, ids, status)
            case StopChildren(child_ids=ids):
                adm.stop(ids)
            case AdoptRequests(request_ids=ids):
                adm.adopt(ids)
            case GrammarReady():
                pass  # _pump admits the requests whose grammar is ready
            case LaunchDue():
                pass  # _pump launches the overlapping step
            case StepDone(epoch=epoch, step_id=step_id, output=output):
                if self.lookahead is not None:
                    self.lookahead.done(step_id, anyio.current_time())
                outputs = adm.step_done(epoch, step_id, output)
                # The next step goes to the executor first: the worker computes it while
                # the output processor handles this one (else the two run in turn).
                launched = await self._pump()
                if outputs is not None and outputs.outputs:
                    if launched:  # the executor runs before the output processor is woken
                        await checkpoint()
                    await self.refs.output_processor.send(
                        StepOutputs(epoch=epoch, outputs=outputs), checkpoint=False
                    )
                if self.sleep_waiters and not adm.inflight:
                    await self._sleep_now()
            case Sleep(level=level, reply=reply):
                if adm.sleep_level:
                    reply.send(None)
                else:
                    self.sleep_waiters.append((level, reply.defer()))  # once steps drain
                    if not adm.inflight:
                        await self._sleep_now()
            case PinLoRAs(names=names, reply=reply):
                adm.pin_loras(frozenset(names))
                reply.send(None)
            case ReleaseKVCache(reply=reply):
                await self._release_kv_cache(reply)
            case WakeUp(tags=tags, reply=reply):
                if adm.sleep_level:
                    await self.refs.executor.ask(lambda r: WakeWorker(tags=tags, reply=r))
                reply.send(adm.wake_up(tags))
            case IsSleeping(reply=reply):
                reply.send(adm.sleep_level > 0 or bool(self.sleep_waiters))
            case PauseGeneration(mode=mode, reply=reply):
                adm.pause_generation(mode)
                reply.send(None)
            case AwaitPaused(clear_cache=clear_cache, reply=reply):
                self.pause_waiters.append((clear_cache, reply.defer()))
            case ResumeGeneration(reply=reply):
                adm.resume_generation()
                waiters, self.pause_waiters = self.pause_waiters, []
                for _, waiter in waiters:
                    waiter.fail(RuntimeError("generation was resumed before the pause completed"))
                reply.send(None)
            case IsPaused(reply=reply):
                reply.send(adm.pause.paused)
            case ResetPrefixCache(reply=reply):
                reply.send(adm.core.reset_prefix_cache())
            case SetKVConnector(enabled=enabled, reply=reply):
                try:
                    adm.set_kv_connector_enabled(enabled)
                except ValueError as exc:
                    reply.fail(exc)
                else:
                    reply.send(None)
            case IsKVConnectorEnabled(reply=reply):
                reply.send(adm.kv_connector_enabled)
            case GetStats(reply=reply):
                reply.send(adm.replica_stats())
            case FinishWeightUpdate(weight_version=version, reply=reply):
                await self._swap_weights(version, reply)
            case SetWeightVersion(weight_version=version, reply=reply):
                adm.weight_versions.current = version
                reply.send(None)
            case GetWeightVersion(reply=reply):
                reply.send(adm.weight_versions.current)
        await self._pump()
        if self.pause_waiters and adm.pause_complete():
            self._paused_now()
        if self.publish_running:
            adm.publish()

    async def _pump(self) -> int:
        """Launch steps while the admission gives one; returns how many."""
        await self._end(self.admission.poll_grammars())
        launched = 0
        while not self._put_off() and (
            step := self.admission.next_step(draining=bool(self.sleep_waiters))
        ):
            if self.lookahead is not None:
                so = step.scheduler_output
                self.lookahead.launched(
                    so.step_id, so.total_num_scheduled_tokens, anyio.current_time()
                )
                self._due = None
            msg = ExecuteStep(
                epoch=step.epoch,
                scheduler_output=step.scheduler_output,
                connector_meta=step.connector_meta,
            )
            # no yield when there is room: a task switch per step saved on the hot path
            await self.refs.executor.send(msg, checkpoint=False)
            launched += 1
        return launched

    def _put_off(self) -> bool:
        """Whether the overlapping step waits for the one running to near its end (then
        the timer is set for it)."""
        adm, lookahead = self.admission, self.lookahead
        if lookahead is None or not adm.inflight or adm.inflight.full:
            return False
        if not adm.core.has_unfinished_requests():
            return False  # nothing to launch: no timer either
        now = anyio.current_time()
        at = lookahead.launch_at(now)
        if at is None or at <= now:
            return False
        if self._due != at:
            self._due = at
            assert self._due_moved is not None
            self._due_moved.set()
        return True

    async def _timer(self) -> None:
        """Sends ``LaunchDue`` to this actor when ``_due`` passes (lives with the
        incarnation). A full mailbox needs no wake-up: every message runs ``_pump``."""
        while True:
            assert self._due_moved is not None
            self._due_moved = moved = anyio.Event()
            due = self._due
            with anyio.CancelScope(deadline=math.inf if due is None else due):
                await moved.wait()
            if self._due is not None and anyio.current_time() >= self._due:
                self._due = None
                with contextlib.suppress(MailboxFull):
                    self.ref.send_nowait(LaunchDue())

    async def _end(self, failures: list[Failure]) -> None:
        """Fail requests for their callers (the output processor closes them)."""
        for failure in failures:
            await self.refs.output_processor.send(
                EndRequest(request_id=failure.request_id, error=failure.reason)
            )

    def _paused_now(self) -> None:
        """The pause is complete: reset the prefix cache when asked (its blocks hold KV of
        the weights about to change), then answer the waiting pause calls. Under keep the
        frozen requests' blocks stay (vLLM's route: clear_cache does not apply to keep):
        the reset happens only when nothing is frozen."""
        waiters, self.pause_waiters = self.pause_waiters, []
        cleared = True
        if any(clear for clear, _ in waiters):
            cleared = self.admission.core.reset_prefix_cache()
            cleared = cleared or not self.admission.pause.schedules_running
        for clear, reply in waiters:
            if clear and not cleared:
                reply.fail(RuntimeError("the prefix cache could not be reset after the pause"))
            else:
                reply.send(None)

    async def _swap_weights(self, version: str | None, reply: Reply[list[object]]) -> None:
        """Apply the staged weights at a step boundary, streams going on: the commit is
        queued on the worker behind the steps already launched (they ran on the old
        weights and keep their label); no step is launched until it is done, and every
        later one is labelled ``version``. Cached prefixes hold the old weights' KV: they
        are forgotten. A failed commit changes nothing (the old weights serve)."""
        try:
            written: list[object] = await self.refs.executor.ask(lambda r: CommitWeights(reply=r))
        except Exception as exc:
            reply.fail(exc)
            return
        self.admission.core.forget_prefix_cache()
        if version is not None:
            self.admission.weight_versions.current = version
        reply.send(written)

    async def _release_kv_cache(self, reply: Reply[None]) -> None:
        """vLLM's conditions, its words: a completed pause (nothing in flight; frozen and
        queued requests are kept, recomputed once the cache is back) and nothing asleep."""
        adm = self.admission
        if adm.sleep_level or self.sleep_waiters:
            reply.fail(
                InvalidRequestError(
                    "release_kv_cache_memory() requires all executor memory to be resident "
                    "(the engine is asleep: wake_up first)."
                )
            )
            return
        if not adm.pause_complete():
            reply.fail(
                InvalidRequestError(
                    "release_kv_cache_memory() requires a completed pause first "
                    "(sleep(level=0) or pause_generation)."
                )
            )
            return
        await self.refs.executor.ask(lambda r: SleepWorker(level=1, tags=[KV_CACHE], reply=r))
        adm.sleep(1, [KV_CACHE])
        reply.send(None)

    async def _sleep_now(self) -> None:
        """No step is in flight: free the KV cache (and weights) on the worker. Requests
        stay in the ledger and are rebuilt, recomputed, at wake-up."""
        level = max(level for level, _ in self.sleep_waiters)
        await self.refs.executor.ask(lambda r: SleepWorker(level=level, reply=r))
        self.admission.sleep(level)
        waiters, self.sleep_waiters = self.sleep_waiters, []
        for _, reply in waiters:
            reply.send(None)
