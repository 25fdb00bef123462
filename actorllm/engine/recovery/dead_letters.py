"""What happens to the message an actor was handling when it crashed.

The supervisor hands every such message (a *dead letter*) to :class:`DeadLetterPolicy`
(each data-parallel replica's core has its own, with its own Admission; the root's serves
the shared actors), which charges the crash to the requests involved (precise blame,
engine/recovery/blame.py) and returns what to redeliver, at the *front* of the same mailbox, to
the restarted actor:

=================  =========================  ==========================================
actor              message                    policy
=================  =========================  ==========================================
router,            Generate / Route /         charge the request; redeliver it, or
input_processor    Abort / FailRequest        ``FailRequest`` when it is poison
output_processor   StepOutputs                charge the step's requests; redeliver split
                                              per request (each replayed alone), poison
                                              ones as ``EndRequest`` with the error
output_processor   Register/EndRequest        charge; redeliver, or fail it when poison
scheduler          AddRequest                 the new incarnation charges it with the
                                              steps in flight (``Admission``) and rebuilds
                                              it from the ledger
scheduler          AbortRequest/StopChildren  redeliver (the rebuilt core must drop them)
scheduler          AdoptRequests              nothing: they are routed to it in the ledger,
                                              and the new incarnation rebuilds from it
scheduler,         steps (StepDone, ...)      nothing here: the new scheduler charges
executor                                      the steps that were in flight
any                a control call (an ask)    the asker gets ActorCrashed
=================  =========================  ==========================================

A poison request of the core is failed by the scheduler itself (``Admission.restart``).
"""

from __future__ import annotations

from typing import Any

from actorllm.actors import ActorStopped
from actorllm.core.engine_core_output import EngineCoreOutput, EngineCoreOutputs
from actorllm.engine.actors.context import EngineContext
from actorllm.engine.actors.messages import (
    Abort,
    AbortRequest,
    AddRequest,
    EndRequest,
    FailRequest,
    Generate,
    RegisterRequest,
    Route,
    StepOutputs,
    StopChildren,
)
from actorllm.engine.recovery.blame import poison_message


class DeadLetterPolicy:
    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx
        self.dead_letters = 0  # how many messages were caught in a crash

    def __call__(self, actor: str, msg: Any, exc: BaseException) -> list[Any]:
        """Returns the messages to put back at the front of ``actor``'s mailbox."""
        if isinstance(exc, ActorStopped):
            return []  # dropped at shutdown, not a crash: the engine fails what is left
        self.dead_letters += 1
        blame = self.ctx.blame
        match msg:
            case Generate() | Route() | Abort() | FailRequest():
                if blame.crash(actor, [msg.request_id]):
                    return [FailRequest(request_id=msg.request_id, reason=poison_message(actor))]
                return [msg]
            case RegisterRequest() | EndRequest():
                if blame.crash(actor, [msg.request_id]):
                    return [_poison_end(msg.request_id, actor)]
                return [msg]
            case StepOutputs():
                return self._retry_split(actor, msg)
            case AddRequest(request=request):
                self.ctx.admission.note_in_hand([request.request_id])
            case AbortRequest() | StopChildren():
                return [msg]
        return []

    def _retry_split(self, actor: str, msg: StepOutputs) -> list[Any]:
        by_request: dict[str, list[EngineCoreOutput]] = {}
        for out in msg.outputs.outputs:
            entry = self.ctx.ledger.entry_of_child(out.req_id)
            if entry is not None:
                by_request.setdefault(entry.request_id, []).append(out)
        blame = self.ctx.blame
        poison = set(blame.crash(actor, list(by_request)))  # then each is replayed alone
        eco = msg.outputs
        retries: list[Any] = [_poison_end(rid, actor) for rid in sorted(poison)]
        retries.extend(
            StepOutputs(
                epoch=msg.epoch,
                outputs=EngineCoreOutputs(
                    step_id=eco.step_id, outputs=outs, stats=eco.stats, timestamp=eco.timestamp
                ),
            )
            for rid, outs in by_request.items()
            if rid not in poison
        )
        return retries


def _poison_end(request_id: str, actor: str) -> EndRequest:
    return EndRequest(request_id=request_id, error=poison_message(actor), finish_in_scheduler=True)


__all__ = ["DeadLetterPolicy"]
