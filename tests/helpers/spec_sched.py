"""Drive a speculative ``ModelRunner`` with the real scheduler until every request ends."""

from __future__ import annotations

from actorllm.core.request import Request
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler import Scheduler, SchedulerConfig
from actorllm.worker.model_runner import ModelRunner

# (a request's tokens when drafts were proposed, those drafts)
Proposal = tuple[list[int], list[int]]


def generate_with_drafts(
    runner: ModelRunner,
    prompts: dict[str, list[int]],
    params: SamplingParams,
    *,
    max_model_len: int,
    block_size: int,
    **cfg: int,
) -> tuple[dict[str, list[int]], Scheduler, list[Proposal]]:
    """Each request's tokens, the scheduler (its statistics), and every proposal made;
    checks that the requests all finished and that no KV block leaked."""
    sched = Scheduler(SchedulerConfig(max_model_len=max_model_len, block_size=block_size, **cfg))
    for rid, p in prompts.items():
        sched.add_request(Request(rid, p, params))
    out: dict[str, list[int]] = {r: [] for r in prompts}
    proposals: list[Proposal] = []
    for _ in range(400):
        if not sched.has_unfinished_requests():
            break
        so = sched.schedule()
        result = runner.execute(so)
        for o in sched.update_from_output(so, result).outputs:
            out[o.req_id].extend(o.new_token_ids)
        for rid, drafts in result.draft_token_ids.items():
            proposals.append((prompts[rid] + out[rid], drafts))
    assert not sched.has_unfinished_requests()
    assert sched.kv_cache_manager.num_free_blocks == sched.config.num_blocks - 1  # no leak
    return out, sched, proposals
