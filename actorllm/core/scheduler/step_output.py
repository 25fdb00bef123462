"""The ``SchedulerOutput`` of a planned step: what the worker is told about it.

New requests (admitted or resumed) carry all their tokens and blocks; requests already on
the worker carry only the blocks this step added; structured requests that sample carry
their bitmask rows (``grammar.py``).
"""

from __future__ import annotations

from actorllm.core.kv_cache import KVCacheManager
from actorllm.core.scheduler.budget import StepBudget
from actorllm.core.scheduler.grammar import GrammarTracker, step_bitmask
from actorllm.core.scheduler_output import CachedRequestData, NewRequestData, SchedulerOutput


def build_output(
    plan: StepBudget,
    kv: KVCacheManager,
    grammar: GrammarTracker | None,
    *,
    step_id: int,
    total_num_scheduled_tokens: int,
    finished_req_ids: list[str],
) -> SchedulerOutput:
    """The output of step ``step_id``, planned in ``plan``, before its requests advance."""
    new_reqs = [
        NewRequestData(
            req_id=r.request_id,
            prompt_token_ids=r.prompt_token_ids,  # never mutated: shared, not copied
            output_token_ids=list(r.output_token_ids),
            sampling_params=r.sampling_params,
            block_ids=kv.get_block_ids(r.request_id),
            num_computed_tokens=r.num_computed_tokens,
            eos_token_id=r.eos_token_id,
            lora_request=r.lora_request,
            prompt_embeds=None if r.prompt_embeds is None else r.prompt_embeds.tensor,
            prompt_embeds_mask=None
            if r.prompt_embeds is None
            else r.prompt_embeds.embedded_positions(),
        )
        for r in plan.new_reqs
    ]
    new_blocks = plan.new_blocks
    nothing_new = kv.nothing_new
    # Most running requests get no new block: one shared (read-only) empty value.
    no_ids: tuple[list[int], ...] = tuple([] for _ in nothing_new)
    cached_reqs = [
        CachedRequestData(
            req_id=r.request_id,
            new_block_ids=no_ids
            if (blocks := new_blocks[r.request_id]) is nothing_new
            else tuple([b.block_id for b in g] for g in blocks),
            num_computed_tokens=r.num_computed_tokens,
        )
        for r in plan.cached_reqs
    ]
    grammar_bitmask = None
    if grammar is not None:
        grammar_bitmask = step_bitmask(
            grammar, (*plan.new_reqs, *plan.cached_reqs), plan.num_scheduled_tokens
        )
    return SchedulerOutput(
        step_id=step_id,
        scheduled_new_reqs=new_reqs,
        scheduled_cached_reqs=cached_reqs,
        num_scheduled_tokens=plan.num_scheduled_tokens,
        total_num_scheduled_tokens=total_num_scheduled_tokens,
        finished_req_ids=finished_req_ids,
        preempted_req_ids=list(plan.preempted),
        grammar_bitmask=grammar_bitmask,
        scheduled_spec_decode_tokens=plan.spec_tokens,
    )
