"""The router: sends each processed request to a data-parallel replica, and ends requests.

Routing decisions are :class:`~actorllm.engine.scheduling.routing.ReplicaRouter`'s (prefix affinity
balanced with load); the router owns the assignment (``ledger.assign``) and sends the
request to that replica's scheduler. When a replica gives up for good (``ReplicaDown``), the
router moves its open requests to the live ones (``AdoptRequests``): they are rebuilt there
from the ledger, prompt + the tokens their callers saw, so nothing is lost or repeated.
With one replica every request goes to it. Control calls go straight to the actor that owns
the state they touch, not through here.
"""

from __future__ import annotations

import contextlib

from actorllm.actors import Actor, ActorStopped
from actorllm.core.request import RequestStatus
from actorllm.engine.actors.context import EngineContext
from actorllm.engine.actors.messages import (
    Abort,
    AbortRequest,
    AddRequest,
    AdoptRequests,
    EndRequest,
    FailRequest,
    NewRequest,
    ReplicaDown,
    Route,
    RouterMsg,
)
from actorllm.engine.recovery.ledger import EntryState
from actorllm.engine.scheduling.routing import ReplicaRouter

SCOPE = "router"


class RouterActor(Actor[RouterMsg]):
    def __init__(self, ctx: EngineContext, routing: ReplicaRouter, alive: set[int]) -> None:
        super().__init__()
        self.ctx = ctx
        self.routing = routing  # outlives this incarnation (the engine keeps it)
        # Replicas whose core has not given up (written by the cores' exit hooks only).
        self.alive = alive

    def report(self) -> object:
        return self.routing.statistics()

    async def handle(self, msg: RouterMsg) -> None:
        for replica in [r for r in self.routing.live if r not in self.alive]:
            await self._replica_down(replica)  # its ReplicaDown did not fit in the mailbox
        match msg:
            case Route(request=request):
                await self._route(request)
            case Abort(request_id=rid):
                await end_request(self.ctx, rid, None)
            case FailRequest(request_id=rid, reason=reason):
                await end_request(self.ctx, rid, reason)
            case ReplicaDown(replica=replica):
                await self._replica_down(replica)
                return
        if self.ctx.blame.has_suspects(SCOPE):
            self.ctx.blame.cleared(SCOPE, [msg.request_id])

    def _loads(self) -> list[int]:
        ledger = self.ctx.ledger
        return [ledger.load(i) for i in range(self.routing.num_replicas)]

    async def _route(self, request: NewRequest) -> None:
        ledger, rid = self.ctx.ledger, request.request_id
        entry = ledger.get(rid)
        if entry is None or entry.state is EntryState.ENDING:
            return  # ended while it was processed
        while self.routing.live:
            replica = entry.replica  # set: a redelivered Route (the scheduler drops doubles)
            if replica is None or replica not in self.routing.live:
                replica = self.routing.route(
                    request.prompt_token_ids, self._loads(), request.cache_salt
                ).replica
                ledger.assign(rid, replica)
            try:
                # No yield when there is room: one turn of the loop per request admitted
                # would throttle admission to a few requests per engine step under load.
                await self.ctx.refs.cores[replica].scheduler.send(
                    AddRequest(request=request), checkpoint=False
                )
                return
            except ActorStopped:  # it died before its ReplicaDown reached us
                await self._replica_down(replica)
                if entry.replica != replica:
                    return  # moved (adopted from the ledger) with the dead replica's others

    async def _replica_down(self, replica: int) -> None:
        """Move the dead replica's open requests to the live ones."""
        if not self.routing.replica_down(replica):
            return
        ledger = self.ctx.ledger
        ledger.retire(replica)  # its outputs still queued are stale
        if not self.routing.live:
            return  # the engine dies with its last replica
        moved: dict[int, list[str]] = {}
        for entry in ledger.on_replica(replica):
            if entry.state is EntryState.ENDING:
                continue  # its end is on its way to the output processor
            assert entry.prompt_token_ids is not None  # routed: processed
            to = self.routing.route(entry.prompt_token_ids, self._loads(), entry.cache_salt).replica
            ledger.assign(entry.request_id, to)
            moved.setdefault(to, []).append(entry.request_id)
        for to, request_ids in moved.items():
            try:
                await self.ctx.refs.cores[to].scheduler.send(AdoptRequests(request_ids=request_ids))
            except ActorStopped:
                await self._replica_down(to)  # that one died too: move them on


async def end_request(ctx: EngineContext, request_id: str, error: str | None) -> None:
    """Abort (``error`` None) or fail a request: its replica's scheduler frees its blocks,
    the output processor ends the caller's stream."""
    entry = ctx.ledger.end(request_id)  # the router routes (or moves) it no more
    if entry is None:
        return
    if entry.replica is not None:
        status = RequestStatus.FINISHED_ABORTED if error is None else RequestStatus.FINISHED_ERROR
        abort = AbortRequest(request_id=request_id, child_ids=list(entry.children), status=status)
        # A dead replica holds no blocks; the router moves nothing that ended.
        with contextlib.suppress(ActorStopped):
            await ctx.refs.cores[entry.replica].scheduler.send(abort)
    await ctx.refs.output_processor.send(EndRequest(request_id=request_id, error=error))
