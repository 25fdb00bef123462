"""Speculative decoding in the scheduler: drafts into a step, verified drafts out of it.

The worker returns draft tokens for a request's next step
(``ModelRunnerOutput.draft_token_ids``), kept in ``request.spec_token_ids``. The next
``schedule()`` computes them as extra positions of the request's decode (their KV slots
allocated with the rest; drafts that the budget or the context length cut are dropped,
:func:`schedule_drafts`) and sends them in ``scheduled_spec_decode_tokens``; the step
returns the accepted drafts plus one token, and ``num_computed_tokens`` steps back over the
rejected ones (their KV is void; the slots stay with the request:
:meth:`SpecDecodeStats.verified`). See ``docs/speculative.md``.
"""

from __future__ import annotations

from typing import final

from actorllm.core.request import Request
from actorllm.core.scheduler.budget import StepBudget


def schedule_drafts(req: Request, num_new: int, plan: StepBudget) -> None:
    """Move ``req``'s drafts into the step: those the ``num_new`` scheduled tokens reach
    (the budget or the context length may cut the run); their lookahead slots are
    allocated with the rest."""
    spec, req.spec_token_ids = req.spec_token_ids, []
    fit = num_new - (req.num_tokens - req.num_computed_tokens)
    if fit > 0:
        plan.spec_tokens[req.request_id] = spec[:fit]


@final
class SpecDecodeStats:
    """Cumulative counts of the verifications a scheduler applied."""

    __slots__ = ("accepted_per_pos", "num_accepted_tokens", "num_draft_tokens", "num_drafts")

    def __init__(self) -> None:
        self.num_drafts = 0  # verifications
        self.num_draft_tokens = 0  # drafts verified
        self.num_accepted_tokens = 0  # drafts accepted
        self.accepted_per_pos: list[int] = []  # [i]: verifications that accepted draft i

    def verified(self, req: Request, num_drafts: int, num_accepted: int) -> None:
        """``req`` verified ``num_drafts`` drafts and accepted the first ``num_accepted``:
        the rejected positions' KV is void, so ``num_computed_tokens`` steps back over them
        (their slots stay the request's, written again by its next step). Counted."""
        req.num_computed_tokens -= num_drafts - num_accepted
        self.num_drafts += 1
        self.num_draft_tokens += num_drafts
        self.num_accepted_tokens += num_accepted
        per_pos = self.accepted_per_pos
        if len(per_pos) < num_drafts:
            per_pos.extend([0] * (num_drafts - len(per_pos)))
        for i in range(num_accepted):
            per_pos[i] += 1
