"""The output processor: detokenize, stop strings, logprobs, ``n > 1``; feed the callers.

Wraps the core ``OutputProcessor``. Each step's results update the ledger (the tokens each
caller has seen, the last step applied) *before* they are delivered, in one synchronous
stretch, so a crash can never deliver a token twice or lose one: a step re-applied after
a crash skips the requests whose ``last_step`` already covers it. A restarted incarnation
rebuilds its detokenizer state by replaying the ledger's tokens without delivering them.

When a step's outputs come while callers woken by the last delivery have not run yet
(the loop was held up while the worker went on), it lets them read first, so a caller's
outputs are merged only when the caller itself does not read.

It is the one owner of a request's end: it marks children finished and closes the ledger
entry (the caller's stream).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from anyio.lowlevel import checkpoint

from actorllm.actors import Actor, ActorRef, ActorStopped, MailboxFull
from actorllm.core.engine_core_output import EngineCoreOutput, EngineCoreOutputs, FinishReason
from actorllm.core.output_processor import OutputProcessor, OutputProcessorStatistics
from actorllm.core.request import RequestStatus
from actorllm.core.request_stats import RequestStats
from actorllm.core.sampling_params import SamplingParams
from actorllm.engine.actors.context import EngineContext
from actorllm.engine.actors.messages import (
    AbortRequest,
    EndRequest,
    FlushOutputs,
    OutputMsg,
    RegisterRequest,
    SchedulerMsg,
    StepOutputs,
    StopChildren,
)
from actorllm.engine.api.request_stream import WakeCount
from actorllm.engine.errors import RequestFailedError, SlowConsumerError
from actorllm.engine.recovery.ledger import LedgerEntry

SCOPE = "output_processor"
# Turns of the loop a step's delivery waits, at most, for callers that have not taken the
# previous one (one turn to finish writing it out, one to take the next: two to spare).
UNREAD_TURNS = 4


class OutputProcessorActor(Actor[OutputMsg]):
    def __init__(self, ctx: EngineContext, tokenizer: Any, stats: RequestStats) -> None:
        super().__init__()
        self.ctx = ctx
        raw = getattr(tokenizer, "backend_tokenizer", None) if tokenizer is not None else None
        # ``stats`` (per-request metrics) outlives this incarnation: the engine reads it.
        self.core = OutputProcessor(raw, stats=stats, stream_interval=ctx.config.stream_interval)

    def report(self) -> OutputProcessorStatistics:
        return self.core.statistics()

    async def on_start(self) -> None:
        stopped: list[str] = []
        for entry in self.ctx.ledger:
            if entry.prompt_token_ids is not None:
                self._register(
                    entry.request_id,
                    entry.prompt_text,
                    entry.prompt_token_ids,
                    entry.params,
                    entry.arrival_time,
                    list(entry.children),
                )
                self._replay(entry)
                stopped.extend(c.child_id for c in entry.children.values() if c.finished)
        if stopped:  # a stop sent from a task of the crashed incarnation may have been lost
            self._stop_in_scheduler(stopped)

    async def handle(self, msg: OutputMsg) -> None:
        match msg:
            case RegisterRequest(request_id=rid):
                if rid in self.ctx.ledger and not self.core.has_request(rid):
                    self._register(
                        rid,
                        msg.prompt_text,
                        msg.prompt_token_ids,
                        msg.params,
                        msg.arrival_time,
                        msg.child_ids,
                    )
            case StepOutputs(epoch=epoch, outputs=eco):
                readers = self.ctx.ledger.woken_readers
                if readers.pending or readers.unread:
                    await _let_callers_read(readers)
                # After the wait, in one synchronous stretch with the apply: a core rebuilt
                # meanwhile re-added these requests from the ledger, so a step of its old
                # epoch applied now would reach the callers twice (once recomputed).
                if self.ctx.ledger.is_current(epoch):  # older: a rebuilt core's past
                    self._apply(epoch, eco)
            case EndRequest(request_id=rid, error=error, finish_in_scheduler=tell):
                if tell and (entry := self.ctx.ledger.get(rid)) is not None:
                    self._abort_in_scheduler(entry, RequestStatus.FINISHED_ERROR)
                self._end(rid, error)
            case FlushOutputs(reply=reply):
                reply.send(None)  # everything before it is delivered
        blame = self.ctx.blame
        if blame.has_suspects(SCOPE):
            blame.cleared(SCOPE, request_ids(self.ctx, msg))

    def _register(
        self,
        rid: str,
        prompt_text: str | None,
        prompt_token_ids: list[int],
        params: SamplingParams,
        arrival_time: float,
        child_ids: list[str],
    ) -> None:
        """Register the children the input processor fanned out (their ids, in order)."""
        for index, child_id in enumerate(child_ids):
            self.core.add_request(
                child_id,
                prompt_text,
                prompt_token_ids,
                params,
                arrival_time,
                parent_id=rid,
                index=index,
            )

    def _replay(self, entry: LedgerEntry) -> None:
        """Rebuild detokenizer, logprob and stop-string state from the tokens folded in
        before the crash, in up to three outputs per child, none of them delivered:

        1. what the caller already saw (counted as sent), with the scheduler's finish
           reason when that is how the child ended;
        2. the tokens stream_interval held back (fewer than the interval, so held again:
           the next output sends them);
        3. for a child the ledger says is finished but whose replay did not end it (a stop
           string finds itself again in step 1; anything else ends as a stop), the end.

        Without 3, a child that finished before the crash while a sibling (``n > 1``) ran
        on would stay open here and its request would never end."""
        children = list(entry.children.values())
        seen: list[EngineCoreOutput] = []
        held: list[EngineCoreOutput] = []
        for c in children:
            sent = len(c.emitted) - c.held
            lps = c.logprobs
            masks = c.sampling_masks
            # The first output's prefix-cache counts and time ride on the child's first replay
            # output (a first output has a token, so there is one).
            cached, written, scheduled = c.first_output or (0, 0, None)
            if sent > 0 or c.finish_reason is not None:  # (a reason is only set with finished)
                seen.append(
                    EngineCoreOutput(
                        req_id=c.child_id,
                        new_token_ids=c.emitted[:sent],
                        new_logprobs=lps[:sent] or None,
                        new_sampling_mask=masks[:sent] or None,
                        finish_reason=c.finish_reason,
                        stop_reason=c.stop_reason,
                        num_cached_tokens=cached,
                        num_cache_creation_tokens=written,
                        scheduled_time=scheduled,
                    )
                )
                cached, written, scheduled = 0, 0, None
            if c.held:
                held.append(
                    EngineCoreOutput(
                        req_id=c.child_id,
                        new_token_ids=c.emitted[sent:],
                        new_logprobs=lps[sent:] or None,
                        new_sampling_mask=masks[sent:] or None,
                        num_cached_tokens=cached,
                        num_cache_creation_tokens=written,
                        scheduled_time=scheduled,
                    )
                )
        ended = [
            EngineCoreOutput(req_id=c.child_id, new_token_ids=[], finish_reason=FinishReason.STOP)
            for c in children
            if c.finished and c.finish_reason is None
        ]  # (a child the replay already ended is skipped by process_outputs)
        for outputs in (seen, held, ended):
            if outputs:
                self.core.process_outputs(EngineCoreOutputs(step_id=-1, outputs=outputs))

    def _apply(self, epoch: int, eco: EngineCoreOutputs) -> None:
        ledger = self.ctx.ledger
        stamp = (epoch, eco.step_id)
        child_of = ledger.child
        outputs = eco.outputs
        # Each output's (entry, child) in the ledger; None: closed. A step applied to a
        # request before a crash (its last_step covers it) is skipped.
        found = [child_of(out.req_id) for out in outputs]
        records = [f for f in found if f is not None and f[0].last_step < stamp]
        fresh = outputs
        if len(records) != len(outputs):
            pairs = [
                (o, f)
                for o, f in zip(outputs, found, strict=True)
                if f is not None and f[0].last_step < stamp
            ]
            fresh = [o for o, _ in pairs]
        if not fresh:
            return
        now = time.monotonic()
        result = self.core.process_outputs(
            eco
            if fresh is outputs and eco.timestamp
            else EngineCoreOutputs(
                step_id=eco.step_id,
                outputs=fresh,
                stats=eco.stats,
                timestamp=eco.timestamp or now,
                weight_version=eco.weight_version,
            )
        )
        # Ledger first, then delivery: no await between them.
        held = result.held  # stream_interval: tokens (and their logprobs) not sent yet
        for out, (entry, child) in zip(fresh, records, strict=True):
            child.emitted += out.new_token_ids
            entry.last_step = stamp
            if out.new_logprobs:
                child.logprobs += out.new_logprobs
            if out.new_sampling_mask:
                child.sampling_masks += out.new_sampling_mask
            if out.scheduled_time is not None:  # (the scheduler's first output)
                child.first_output = (
                    out.num_cached_tokens,
                    out.num_cache_creation_tokens,
                    out.scheduled_time,
                )
            if out.finish_reason is not None:
                child.finished = True
                child.finish_reason = out.finish_reason
                child.stop_reason = out.stop_reason
            if held and (count := held.get(out.req_id)) is not None:
                child.held = count
        for child_id in result.reqs_to_abort:
            if (stopped := child_of(child_id)) is not None:
                stopped[1].finished = True
        for rid in ledger.deliver_step(result.request_outputs):
            self._drop_slow_consumer(rid)
        for rid in result.finished_ids:
            ledger.close(rid)  # (a slow consumer's entry is gone already)
        if result.reqs_to_abort:
            self._stop_in_scheduler(result.reqs_to_abort)

    def _drop_slow_consumer(self, rid: str) -> None:
        """The caller stopped reading: abort the request (free its blocks) and end its
        stream with ``SlowConsumerError`` after the outputs it has not read yet."""
        ledger = self.ctx.ledger
        entry = ledger.get(rid)
        assert entry is not None and ledger.max_backlog is not None  # deliver() said slow
        for child in entry.children.values():
            child.finished = True
        self._abort_in_scheduler(entry, RequestStatus.FINISHED_ABORTED)
        self.core.abort_request(rid, time.monotonic())
        ledger.close(rid, SlowConsumerError(rid, ledger.max_backlog))

    def _stop_in_scheduler(self, child_ids: list[str]) -> None:
        by_replica: dict[int, list[str]] = {}
        for child_id in child_ids:
            entry = self.ctx.ledger.entry_of_child(child_id)
            if entry is not None and entry.replica is not None:
                by_replica.setdefault(entry.replica, []).append(child_id)
        for replica, ids in by_replica.items():
            self._to_scheduler(replica, StopChildren(child_ids=ids))

    def _abort_in_scheduler(self, entry: LedgerEntry, status: RequestStatus) -> None:
        if entry.replica is not None:
            msg = AbortRequest(
                request_id=entry.request_id, child_ids=list(entry.children), status=status
            )
            self._to_scheduler(entry.replica, msg)

    def _to_scheduler(self, replica: int, msg: StopChildren | AbortRequest) -> None:
        """Never block on a scheduler (it may be blocked sending to us): send now, or from
        a background task when its mailbox is full. A dead replica is skipped: the ledger
        (children marked finished first) is what the router moves to the others."""
        ref = self.ctx.refs.cores[replica].scheduler
        try:
            ref.send_nowait(msg)
        except MailboxFull:
            self.task_group.start_soon(_send_unless_stopped, ref, msg)
        except ActorStopped:
            pass

    def _end(self, rid: str, error: str | None) -> None:
        ledger = self.ctx.ledger
        entry = ledger.get(rid)
        if entry is not None:
            for child in entry.children.values():
                child.finished = True
        if error is None:
            final = self.core.abort_request(rid, time.monotonic())
            if final is not None and not ledger.deliver(rid, final) and entry and entry.slow:
                assert ledger.max_backlog is not None  # only a bounded stream is ever slow
                ledger.close(rid, SlowConsumerError(rid, ledger.max_backlog))
            ledger.close(rid)
        else:
            if self.core.has_request(rid):
                self.core.fail_request(rid, error, time.monotonic())
            ledger.close(rid, RequestFailedError(rid, error))


async def _let_callers_read(readers: WakeCount) -> None:
    """Callers woken by an earlier delivery have not run yet (the loop was held up, or the
    next step came in the same turn of the loop), or have not taken it yet (still writing
    the one before to their socket: under async scheduling two steps' outputs can come in
    one turn): they read it before this step's outputs are delivered, so a caller's outputs
    merge only when the caller itself does not read. Two checkpoints: trio runs the tasks
    woken together in either order, and one woken before the first checkpoint has run by
    the end of the second (on asyncio, by the end of the first); then up to
    :data:`UNREAD_TURNS` more while a delivery is still unread. Bounded: a client that does
    not read costs these few turns a step, and its outputs merge."""
    await checkpoint()
    await checkpoint()
    for _ in range(UNREAD_TURNS):
        if not readers.unread:
            return
        await checkpoint()


async def _send_unless_stopped(ref: ActorRef[SchedulerMsg], msg: SchedulerMsg) -> None:
    with contextlib.suppress(ActorStopped):  # the replica died meanwhile
        await ref.send(msg)


def request_ids(ctx: EngineContext, msg: OutputMsg) -> list[str]:
    """The user-facing requests a message is about."""
    if isinstance(msg, StepOutputs):
        ids = []
        for out in msg.outputs.outputs:
            entry = ctx.ledger.entry_of_child(out.req_id)
            if entry is not None:
                ids.append(entry.request_id)
        return list(dict.fromkeys(ids))
    if isinstance(msg, FlushOutputs):
        return []
    return [msg.request_id]
