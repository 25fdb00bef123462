"""The scheduler actor: owns the core ``Scheduler`` and drives the step loop.

The loop is event-driven, with no background task: after every message the actor launches
steps while fewer than ``max_inflight`` (1, or 2 under async scheduling) are outstanding and
there is work. ``StepDone`` from the executor feeds ``update_from_output`` and the results
go on to the output processor.

Deadlock rule: the scheduler awaits sends to the executor (whose mailbox holds at most a
few steps, so never blocks for long) and to the output processor. Nobody on a path back to
the scheduler may block on the scheduler's mailbox while the scheduler waits on them: the
executor's results come through its own mailbox, and the output processor hands
stop-string aborts over without blocking (``send_nowait``, or ``ctx.pending_aborts``).

Recovery: every incarnation starts a new core epoch and rebuilds its requests from the
ledger (prompt + tokens the caller already saw), charging the crash to the steps that were
in flight (engine/recovery.py). Suspects are re-admitted one at a time.
"""

from __future__ import annotations

import contextlib
from collections import deque
from typing import Any

import msgspec

from actorllm.actors import Actor
from actorllm.core.errors import InvalidRequestError
from actorllm.core.request import Request, RequestStatus
from actorllm.core.scheduler import Scheduler, SchedulerConfig
from actorllm.core.scheduler_output import SchedulerOutput
from actorllm.engine.context import EngineContext
from actorllm.engine.messages import (
    AbortRequests,
    AddRequest,
    Control,
    ControlOp,
    EndRequest,
    ExecuteStep,
    ExecutorCall,
    GrammarReady,
    SchedulerMsg,
    StepDone,
    StepOutputs,
)
from actorllm.engine.recovery import charge_crash, clear_suspects, crash_message


def build_scheduler_config(ctx: EngineContext) -> SchedulerConfig:
    cfg = ctx.config
    max_len = ctx.model.max_model_len
    return SchedulerConfig(
        max_num_seqs=cfg.max_num_seqs,
        max_num_batched_tokens=cfg.resolved_max_num_batched_tokens(max_len),
        max_model_len=max_len,
        block_size=cfg.block_size,
        num_blocks=ctx.model.num_blocks,
        enable_prefix_caching=cfg.enable_prefix_caching,
        enable_chunked_prefill=cfg.enable_chunked_prefill,
        long_prefill_token_threshold=cfg.long_prefill_token_threshold,
        policy=cfg.scheduling_policy,
        async_scheduling=cfg.async_scheduling,
    )


class SchedulerActor(Actor[SchedulerMsg]):
    def __init__(self, ctx: EngineContext) -> None:
        super().__init__()
        self.ctx = ctx
        ctx.live["scheduler"] = self
        ctx.core_epoch += 1  # before anything reads the ledger: older outputs are now stale
        self.epoch = ctx.core_epoch
        self.core = self._new_core()
        self.max_inflight = 2 if ctx.config.async_scheduling else 1
        self.inflight: dict[int, SchedulerOutput] = {}  # {step_id: step at the executor}
        self.pending_finished: list[str] = []  # finished/preempted ids of empty steps
        self.probation: deque[str] = deque()  # suspects waiting to be re-admitted
        self.on_probation: str | None = None  # the suspect admitted and not yet cleared
        self.sleep_waiters: list[tuple[int, Any]] = []  # (level, reply) until steps drain

    def _new_core(self) -> Scheduler:
        connector = self.ctx.connector_factory() if self.ctx.connector_factory else None
        grammar = None
        if self.ctx.structured is not None:
            grammar = self.ctx.structured.tracker(self._grammar_ready)
        core = Scheduler(build_scheduler_config(self.ctx), kv_connector=connector, grammar=grammar)
        if connector is not None:
            core.set_kv_connector_enabled(self.ctx.kv_connector_enabled)
        return core

    # -- lifecycle ------------------------------------------------------------------------

    async def on_start(self) -> None:
        crashed = [rid for ids in self.ctx.inflight.values() for rid in ids]
        self.ctx.inflight.clear()
        if crashed:
            for rid in charge_crash(self.ctx.ledger, crashed):
                entry = self.ctx.ledger.get(rid)
                assert entry is not None  # charge_crash returns open requests only
                await self._fail(rid, crash_message("core", entry.crash_count))
        if not self.ctx.sleeping:
            self._rebuild_from_ledger()
            await self._admit_next_suspect()
            await self._pump()

    # -- messages -------------------------------------------------------------------------

    async def handle(self, msg: SchedulerMsg) -> None:
        self.ctx.maybe_fault("scheduler", msg)
        match msg:
            case AddRequest(request_id=rid):
                entry = self.ctx.ledger.get(rid)
                if entry is not None and not self.ctx.sleeping:
                    await self._admit(rid)
            case AbortRequests(child_ids=ids, status=status):
                self.core.finish_requests(ids, status)
            case StepDone():
                await self._step_done(msg)
            case GrammarReady():
                pass  # _pump admits the requests whose grammar is ready
            case Control():
                await self._control(msg)
        await self._drain_pending_aborts()
        await self._pump()

    async def _step_done(self, msg: StepDone) -> None:
        if msg.epoch != self.epoch:
            return  # computed before a rebuild: its requests are being recomputed
        so = self.inflight.pop(msg.step_id)
        request_ids = self.ctx.inflight.pop(msg.step_id, [])
        outputs = self.core.update_from_output(so, msg.output)
        self.ctx.steps_done += 1
        self.ctx.iteration_tokens.append(so.total_num_scheduled_tokens)
        if clear_suspects(self.ctx.ledger, request_ids) and self.on_probation in request_ids:
            self.on_probation = None
        await self.ctx.ref("output_processor").send(StepOutputs(epoch=self.epoch, outputs=outputs))
        await self._admit_next_suspect()
        if self.sleep_waiters and not self.inflight:
            await self._sleep_now()

    # -- the step loop --------------------------------------------------------------------

    def _grammar_ready(self) -> None:
        """On the loop, from a compile thread's callback: wake this scheduler (never block;
        a full mailbox will pump soon anyway)."""
        with contextlib.suppress(Exception):
            self.ctx.ref("scheduler").send_nowait(GrammarReady())

    async def _pump(self) -> None:
        if self.core.has_waiting_for_grammar() and not self.ctx.sleeping:
            self.core.poll_grammars()
        for child_id, error in self.core.take_grammar_failures():
            entry = self.ctx.ledger.entry_of_child(child_id)
            if entry is not None:
                await self._fail(entry.request_id, error)
        while (
            not self.ctx.sleeping
            and not self.sleep_waiters
            and len(self.inflight) < self.max_inflight
            and self.core.has_unfinished_requests()
        ):
            so = self.core.schedule()
            if so.is_empty:
                # Nothing fits this step (blocks exhausted until a step finishes); remember
                # what the worker must drop and tell it with the next step.
                self.pending_finished.extend(so.finished_req_ids)
                self.pending_finished.extend(so.preempted_req_ids)
                break
            if self.pending_finished:
                so = msgspec.structs.replace(
                    so, finished_req_ids=[*self.pending_finished, *so.finished_req_ids]
                )
                self.pending_finished = []
            self.inflight[so.step_id] = so
            self.ctx.inflight[so.step_id] = self._request_ids(so)
            meta = self.core.take_connector_metadata()
            await self.ctx.ref("executor").send(
                ExecuteStep(epoch=self.epoch, scheduler_output=so, connector_meta=meta)
            )

    def _request_ids(self, so: SchedulerOutput) -> list[str]:
        ids = []
        for child_id in so.num_scheduled_tokens:
            entry = self.ctx.ledger.entry_of_child(child_id)
            if entry is not None:
                ids.append(entry.request_id)
        return list(dict.fromkeys(ids))

    async def _drain_pending_aborts(self) -> None:
        if self.ctx.pending_aborts:
            ids, self.ctx.pending_aborts[:] = list(self.ctx.pending_aborts), []
            self.core.finish_requests(ids, RequestStatus.FINISHED_STOPPED)
        if self.ctx.pending_aborts_error:
            ids, self.ctx.pending_aborts_error[:] = list(self.ctx.pending_aborts_error), []
            self.core.finish_requests(ids, RequestStatus.FINISHED_ERROR)

    # -- admission and recovery -----------------------------------------------------------

    def _rebuild_from_ledger(self) -> None:
        seen: set[str] = set()
        for entry, _child in self.ctx.ledger.open_children():
            if entry.request_id in seen:
                continue
            seen.add(entry.request_id)
            if entry.suspect:
                self.probation.append(entry.request_id)
            else:
                self._add_children(entry.request_id)

    async def _admit(self, request_id: str) -> None:
        entry = self.ctx.ledger.get(request_id)
        if entry is None:
            return
        if entry.suspect and request_id != self.on_probation:
            if request_id not in self.probation:
                self.probation.append(request_id)
            await self._admit_next_suspect()
            return
        failed = self._add_children(request_id)
        if failed is not None:
            await self._fail(request_id, str(failed))

    async def _admit_next_suspect(self) -> None:
        if self.on_probation is not None:
            entry = self.ctx.ledger.get(self.on_probation)
            if entry is not None and entry.suspect:
                return  # still on probation
            self.on_probation = None
        while self.probation:
            rid = self.probation.popleft()
            entry = self.ctx.ledger.get(rid)
            if entry is None:
                continue
            self.on_probation = rid if entry.suspect else None
            failed = self._add_children(rid)
            if failed is not None:
                await self._fail(rid, str(failed))
                self.on_probation = None
                continue
            return

    def _add_children(self, request_id: str) -> BaseException | None:
        """Add the request's unfinished children to the core; returns the error that
        rejected it, if any."""
        entry = self.ctx.ledger.get(request_id)
        if entry is None or entry.prompt_token_ids is None:
            return None
        for child in entry.children.values():
            if child.finished or self.core.get_request(child.child_id) is not None:
                continue
            request = Request(
                child.child_id,
                entry.prompt_token_ids,
                child.params,
                eos_token_id=entry.eos_token_id,
                arrival_time=entry.arrival_time,
                priority=entry.priority,
                output_token_ids=child.emitted,
            )
            try:
                self.core.add_request(request)
            except InvalidRequestError as exc:
                return exc
        return None

    async def _fail(self, request_id: str, reason: str) -> None:
        """End a request with an error: finished here at once (so a rebuild skips it),
        ended for the caller by the output processor."""
        entry = self.ctx.ledger.get(request_id)
        if entry is None:
            return
        for child in entry.children.values():
            child.finished = True
        self.core.finish_requests(list(entry.children), RequestStatus.FINISHED_ERROR)
        await self.ctx.ref("output_processor").send(EndRequest(request_id=request_id, error=reason))

    # -- control plane --------------------------------------------------------------------

    async def _control(self, msg: Control) -> None:
        op, reply = msg.op, msg.reply
        if op is ControlOp.SLEEP:
            if self.ctx.sleeping:
                reply.send(None)
            else:
                self.sleep_waiters.append(
                    (int(msg.arg), reply.defer())
                )  # answered once steps drain
                if not self.inflight:
                    await self._sleep_now()
        elif op is ControlOp.WAKE_UP:
            await self._wake_up()
            reply.send(None)
        elif op is ControlOp.IS_SLEEPING:
            reply.send(self.ctx.sleeping > 0 or bool(self.sleep_waiters))
        elif op is ControlOp.RESET_PREFIX_CACHE:
            reply.send(self.core.reset_prefix_cache())
        elif op is ControlOp.SET_KV_CONNECTOR:
            if self.ctx.connector_factory is None:
                reply.fail(
                    InvalidRequestError(
                        "no KV connector is configured (start the engine "
                        "with kv_connector='offload').",
                        param="enabled",
                    )
                )
                return
            self.ctx.kv_connector_enabled = bool(msg.arg)
            self.core.set_kv_connector_enabled(bool(msg.arg))
            reply.send(None)
        elif op is ControlOp.IS_KV_CONNECTOR_ENABLED:
            reply.send(self.ctx.connector_factory is not None and self.core.kv_connector_enabled)
        elif op is ControlOp.GET_STATS:
            reply.send(self.core.stats())
        else:  # pragma: no cover - the enum is closed
            reply.fail(ValueError(f"unknown control op {op}"))

    async def _sleep_now(self) -> None:
        """No step is in flight: free the KV cache (and weights) on the worker. Requests
        stay in the ledger and are rebuilt, recomputed, at wake-up."""
        level = max(level for level, _ in self.sleep_waiters)
        await self.ctx.ref("executor").ask(
            lambda r: ExecutorCall(method="sleep", args=(level,), reply=r), timeout=None
        )
        self.ctx.sleeping = level
        self.core = self._new_core()  # the KV cache is gone: so are the block tables
        waiters, self.sleep_waiters = self.sleep_waiters, []
        for _, reply in waiters:
            reply.send(None)

    async def _wake_up(self) -> None:
        if not self.ctx.sleeping:
            return
        await self.ctx.ref("executor").ask(
            lambda r: ExecutorCall(method="wake_up", reply=r), timeout=None
        )
        self.ctx.core_epoch += 1
        self.epoch = self.ctx.core_epoch
        self.core = self._new_core()
        self.ctx.sleeping = 0
        self._rebuild_from_ledger()
        await self._admit_next_suspect()
