"""The output processor: detokenize, stop strings, logprobs, ``n > 1``; feed the callers.

Wraps the core ``OutputProcessor``. Each step's results update the ledger (the tokens each
caller has seen, the last step applied) *before* they are delivered, in one synchronous
stretch, so a crash can never deliver a token twice or lose one: a step re-applied after
a crash skips the requests whose ``last_step`` already covers it. A restarted incarnation
rebuilds its detokenizer state by replaying the ledger's tokens without delivering them.
"""

from __future__ import annotations

import time

from actorllm.actors import Actor
from actorllm.core.engine_core_output import EngineCoreOutput, EngineCoreOutputs
from actorllm.core.output_processor import OutputProcessor
from actorllm.core.request import RequestStatus
from actorllm.engine.context import EngineContext
from actorllm.engine.errors import RequestFailedError
from actorllm.engine.ledger import LedgerEntry
from actorllm.engine.messages import (
    AbortRequests,
    EndRequest,
    OutputMsg,
    RegisterRequest,
    StepOutputs,
)


class OutputProcessorActor(Actor[OutputMsg]):
    def __init__(self, ctx: EngineContext) -> None:
        super().__init__()
        self.ctx = ctx
        ctx.live["output_processor"] = self
        raw = (
            getattr(ctx.tokenizer, "backend_tokenizer", None) if ctx.tokenizer is not None else None
        )
        self.core = OutputProcessor(raw, stats=ctx.request_stats)

    async def on_start(self) -> None:
        for entry in self.ctx.ledger:
            if entry.processed:
                self._register(entry, replay=True)

    async def handle(self, msg: OutputMsg) -> None:
        self.ctx.maybe_fault("output_processor", msg)
        match msg:
            case RegisterRequest(request_id=rid):
                entry = self.ctx.ledger.get(rid)
                if entry is not None and not self.core.has_request(rid):
                    self._register(entry, replay=False)
            case StepOutputs(epoch=epoch, outputs=eco):
                if epoch == self.ctx.core_epoch:
                    self._apply(epoch, eco)
            case EndRequest(request_id=rid, error=error):
                self._end(rid, error)

    def _register(self, entry: LedgerEntry, *, replay: bool) -> None:
        assert entry.prompt_token_ids is not None
        prompt = entry.prompt_text if entry.prompt_text is not None else None
        self.core.add_request(
            entry.request_id, prompt, entry.prompt_token_ids, entry.params, entry.arrival_time
        )
        if replay:
            # Rebuild detokenizer and stop-string state from what the caller already saw.
            outputs = [
                EngineCoreOutput(req_id=child.child_id, new_token_ids=list(child.emitted))
                for child in entry.children.values()
                if child.emitted
            ]
            if outputs:
                self.core.process_outputs(EngineCoreOutputs(step_id=-1, outputs=outputs))

    def _apply(self, epoch: int, eco: EngineCoreOutputs) -> None:
        ledger = self.ctx.ledger
        stamp = (epoch, eco.step_id)
        fresh: list[EngineCoreOutput] = []
        touched: dict[str, LedgerEntry] = {}
        for out in eco.outputs:
            entry = ledger.entry_of_child(out.req_id)
            if entry is None or entry.last_step >= stamp:
                continue  # closed, or this step was applied before a crash
            fresh.append(out)
            touched[entry.request_id] = entry
        if not fresh:
            return
        now = time.monotonic()
        result = self.core.process_outputs(
            EngineCoreOutputs(
                step_id=eco.step_id, outputs=fresh, stats=eco.stats, timestamp=eco.timestamp or now
            )
        )
        # Ledger first, then delivery: no await between them.
        for out in fresh:
            entry = ledger.entry_of_child(out.req_id)
            assert entry is not None
            child = entry.children[out.req_id]
            child.emitted.extend(out.new_token_ids)
            if out.finished:
                child.finished = True
        for child_id in result.reqs_to_abort:
            entry = ledger.entry_of_child(child_id)
            if entry is not None:
                entry.children[child_id].finished = True
        for entry in touched.values():
            entry.last_step = stamp
        for rid, request_output in result.request_outputs:
            ledger.deliver(rid, request_output)
        for rid in result.finished_ids:
            ledger.close(rid)
        if result.reqs_to_abort:
            self._stop_in_scheduler(result.reqs_to_abort)

    def _stop_in_scheduler(self, child_ids: list[str]) -> None:
        """Never block on the scheduler (it may be blocked sending to us)."""
        msg = AbortRequests(child_ids=child_ids, status=RequestStatus.FINISHED_STOPPED)
        try:
            self.ctx.ref("scheduler").send_nowait(msg)
        except Exception:
            self.ctx.pending_aborts.extend(child_ids)

    def _end(self, rid: str, error: str | None) -> None:
        ledger = self.ctx.ledger
        if error is None:
            final = self.core.abort_request(rid, time.monotonic())
            if final is not None:
                ledger.deliver(rid, final)
            ledger.close(rid)
        else:
            if self.core.has_request(rid):
                self.core.fail_request(rid, error, time.monotonic())
            ledger.close(rid, RequestFailedError(rid, error))
