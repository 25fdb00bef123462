"""What happens to the message an actor was handling when it crashed.

The supervisor hands every such message (a *dead letter*) to :class:`DeadLetterPolicy`,
which charges the crash to the requests involved (engine/recovery.py) and returns what to
redeliver, at the *front* of the same mailbox, to the restarted actor:

=================  =========================  ==========================================
actor              message                    policy
=================  =========================  ==========================================
router             Generate / Abort           charge, retry once (a 2nd crash fails it)
input_processor    ProcessRequest             charge, retry once
output_processor   StepOutputs                charge each request, retry split per
                                              request (a poison one fails alone)
output_processor   Register/EndRequest        charge, retry once
scheduler          AddRequest                 charge; the rebuilt core re-adds it
scheduler,         steps (StepDone, ...)      nothing here: the new scheduler charges
executor                                      the steps that were in flight
any                Control (an ask)           the asker gets ActorCrashed
=================  =========================  ==========================================
"""

from __future__ import annotations

from typing import Any

from actorllm.actors import ActorStopped
from actorllm.core.engine_core_output import EngineCoreOutputs
from actorllm.engine.context import EngineContext
from actorllm.engine.errors import RequestFailedError
from actorllm.engine.messages import (
    Abort,
    AddRequest,
    EndRequest,
    Generate,
    ProcessRequest,
    RegisterRequest,
    StepOutputs,
)
from actorllm.engine.recovery import charge_crash, crash_message

_RETRIED = (Generate, Abort, ProcessRequest, RegisterRequest, EndRequest)


class DeadLetterPolicy:
    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx
        self.dead_letters = 0  # how many messages were caught in a crash

    def __call__(self, actor: str, msg: Any, exc: BaseException) -> list[Any]:
        """Returns the messages to put back at the front of ``actor``'s mailbox."""
        if isinstance(exc, ActorStopped):
            return []  # dropped at shutdown, not a crash: the engine fails what is left
        self.dead_letters += 1
        if isinstance(msg, _RETRIED):
            return self._retry_one(actor, msg, msg.request_id)
        if isinstance(msg, StepOutputs):
            return self._retry_split(actor, msg)
        if isinstance(msg, AddRequest):
            self._fail(actor, charge_crash(self.ctx.ledger, [msg.request_id]))
        return []

    def _retry_one(self, actor: str, msg: Any, request_id: str) -> list[Any]:
        doomed = charge_crash(self.ctx.ledger, [request_id])
        self._fail(actor, doomed)
        return [] if doomed else [msg]

    def _retry_split(self, actor: str, msg: StepOutputs) -> list[Any]:
        by_request: dict[str, list[Any]] = {}
        for out in msg.outputs.outputs:
            entry = self.ctx.ledger.entry_of_child(out.req_id)
            if entry is not None:
                by_request.setdefault(entry.request_id, []).append(out)
        doomed = set(charge_crash(self.ctx.ledger, list(by_request)))
        self._fail(actor, sorted(doomed))
        eco = msg.outputs
        return [
            StepOutputs(
                epoch=msg.epoch,
                outputs=EngineCoreOutputs(
                    step_id=eco.step_id, outputs=outs, stats=eco.stats, timestamp=eco.timestamp
                ),
            )
            for rid, outs in by_request.items()
            if rid not in doomed
        ]

    def _fail(self, actor: str, request_ids: list[str]) -> None:
        """End poison requests now, without waiting on any mailbox."""
        for rid in request_ids:
            entry = self.ctx.ledger.get(rid)
            if entry is None:
                continue
            child_ids = list(entry.children)
            for child in entry.children.values():
                child.finished = True
            if child_ids:
                self.ctx.pending_aborts_error.extend(child_ids)
            reason = crash_message(actor, entry.crash_count)
            try:  # the output processor drops its state and ends the caller's stream
                self.ctx.ref("output_processor").send_nowait(
                    EndRequest(request_id=rid, error=reason)
                )
            except Exception:
                self.ctx.ledger.close(rid, RequestFailedError(rid, reason))


__all__ = ["DeadLetterPolicy"]
