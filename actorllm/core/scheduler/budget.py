"""One step's plan while it is being built: the token budget and who got what."""

from __future__ import annotations

from typing import final

from actorllm.core.kv_cache.kv_cache_manager import GroupBlocks
from actorllm.core.request import Request


@final
class StepBudget:
    """Mutable scratch state of one ``schedule()`` call.

    Requests may be *unscheduled* again (a victim preempted later in the same step), which
    gives their tokens back to the budget.
    """

    __slots__ = (
        "cached_reqs",
        "chunk_cap",
        "new_blocks",
        "new_reqs",
        "num_scheduled_tokens",
        "preempted",
        "spec_tokens",
        "token_budget",
    )

    def __init__(self, token_budget: int, chunk_cap: int = 0) -> None:
        self.token_budget = token_budget  # tokens still schedulable this step
        self.chunk_cap = chunk_cap  # the most tokens one request gets this step (0: no cap)
        self.num_scheduled_tokens: dict[str, int] = {}  # {req_id: tokens this step}
        self.new_reqs: list[Request] = []  # admitted or resumed: the worker gets everything
        self.cached_reqs: list[Request] = []  # already on the worker: only new blocks
        # {req_id: blocks added, one list per KV cache group}, cached reqs
        self.new_blocks: dict[str, GroupBlocks] = {}
        self.preempted: dict[str, Request] = {}  # {req_id: request} preempted this step
        self.spec_tokens: dict[str, list[int]] = {}  # {req_id: drafts verified this step}

    def add_cached(self, req: Request, num_tokens: int, new_blocks: GroupBlocks) -> None:
        self.cached_reqs.append(req)
        self.new_blocks[req.request_id] = new_blocks
        self.num_scheduled_tokens[req.request_id] = num_tokens
        self.token_budget -= num_tokens

    def add_new(self, req: Request, num_tokens: int) -> None:
        self.new_reqs.append(req)
        self.num_scheduled_tokens[req.request_id] = num_tokens
        self.token_budget -= num_tokens

    def unschedule(self, req: Request) -> None:
        """Forget ``req`` if it was scheduled this step, returning its tokens to the budget."""
        n = self.num_scheduled_tokens.pop(req.request_id, None)
        if n is None:
            return
        self.token_budget += n
        self.spec_tokens.pop(req.request_id, None)
        if self.new_blocks.pop(req.request_id, None) is not None:
            self.cached_reqs.remove(req)
        else:
            self.new_reqs.remove(req)
