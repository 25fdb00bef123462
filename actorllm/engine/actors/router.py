"""The router: the engine's front door for requests (control calls go straight to the
actor that owns the state they touch)."""

from __future__ import annotations

from actorllm.actors import Actor
from actorllm.core.request import RequestStatus
from actorllm.engine.context import EngineContext
from actorllm.engine.messages import (
    Abort,
    AbortRequest,
    EndRequest,
    FailRequest,
    Generate,
    RouterMsg,
)

SCOPE = "router"


class RouterActor(Actor[RouterMsg]):
    def __init__(self, ctx: EngineContext) -> None:
        super().__init__()
        self.ctx = ctx

    async def handle(self, msg: RouterMsg) -> None:
        match msg:
            case Generate():
                await self.ctx.refs.input_processor.send(msg)
            case Abort(request_id=rid):
                await end_request(self.ctx, rid, None)
            case FailRequest(request_id=rid, reason=reason):
                await end_request(self.ctx, rid, reason)
        if self.ctx.blame.has_suspects(SCOPE):
            self.ctx.blame.cleared(SCOPE, [msg.request_id])


async def end_request(ctx: EngineContext, request_id: str, error: str | None) -> None:
    """Abort (``error`` None) or fail a request: the scheduler frees its blocks, the output
    processor ends the caller's stream."""
    entry = ctx.ledger.get(request_id)
    if entry is None:
        return
    status = RequestStatus.FINISHED_ABORTED if error is None else RequestStatus.FINISHED_ERROR
    await ctx.refs.scheduler.send(
        AbortRequest(request_id=request_id, child_ids=list(entry.children), status=status)
    )
    await ctx.refs.output_processor.send(EndRequest(request_id=request_id, error=error))
