"""The router: the engine's front door. Routes each call to the actor that owns it."""

from __future__ import annotations

from actorllm.actors import Actor
from actorllm.core.request import RequestStatus
from actorllm.engine.context import EngineContext
from actorllm.engine.messages import (
    Abort,
    AbortRequests,
    Control,
    EndRequest,
    Generate,
    ProcessRequest,
    RouterMsg,
)


class RouterActor(Actor[RouterMsg]):
    def __init__(self, ctx: EngineContext) -> None:
        super().__init__()
        self.ctx = ctx

    async def handle(self, msg: RouterMsg) -> None:
        self.ctx.maybe_fault("router", msg)
        match msg:
            case Generate(request_id=rid, is_chat=is_chat, chat_options=opts):
                await self.ctx.ref("input_processor").send(
                    ProcessRequest(request_id=rid, is_chat=is_chat, chat_options=opts)
                )
            case Abort(request_id=rid):
                entry = self.ctx.ledger.get(rid)
                if entry is None:
                    return
                if entry.children:
                    child_ids = list(entry.children)
                    await self.ctx.ref("scheduler").send(
                        AbortRequests(child_ids=child_ids, status=RequestStatus.FINISHED_ABORTED)
                    )
                await self.ctx.ref("output_processor").send(EndRequest(request_id=rid))
            case Control(op=op, arg=arg, reply=reply):
                # Relay rather than forward: an ask is tied to the mailbox it was sent to,
                # so the scheduler's crash fails this ask instead of leaving it hanging.
                try:
                    result = await self.ctx.ref("scheduler").ask(
                        lambda r: Control(op=op, arg=arg, reply=r), timeout=None
                    )
                except Exception as exc:
                    reply.fail(exc)
                else:
                    reply.send(result)
