"""The ``EngineCoreOutput`` that reports one request's share of a step's results: the
tokens the scheduler appended (up to the first that stopped it), or a pooled result.

The scheduler appends the tokens and finishes the request; this only words the report.
"""

from __future__ import annotations

from actorllm.core.engine_core_output import EngineCoreOutput
from actorllm.core.model_runner_output import TokenLogprobs
from actorllm.core.pooling_params import PooledData
from actorllm.core.request import FINISH_REASONS, Request, RequestStatus
from actorllm.core.routed_experts import RoutedExperts


def token_output(
    req: Request,
    tokens: list[int],
    status: RequestStatus | None,
    logprobs: list[TokenLogprobs] | None,
    prompt_logprobs: list[TokenLogprobs] | None,
    cache_block: int = 0,
    sampling_mask: list[list[int]] | None = None,
) -> EngineCoreOutput:
    """Report ``tokens`` appended to ``req`` (``status``: the finished status they put it
    in, or None; ``logprobs``: one per token, if asked); the request's first report also
    carries its prefix-cache hit, the prompt tokens it wrote to the cache
    (:func:`cache_created`; ``cache_block``: the block size, 0 without prefix caching;
    ``sampling_mask``: each token's surviving ids, with --return-sampling-mask) and
    the time it was first scheduled; the first report after a preemption, the request's
    preemptions so far."""
    cached, created, scheduled, preempted = 0, 0, None, 0
    if not req.emitted_first_output:
        req.emitted_first_output = True
        cached, scheduled = max(req.num_cached_tokens, 0), req.first_scheduled_time
        created = cache_created(req, cache_block)
    if req.num_preemptions != req.reported_preemptions:
        req.reported_preemptions = preempted = req.num_preemptions
    return EngineCoreOutput(
        req_id=req.request_id,
        new_token_ids=tokens,
        new_logprobs=logprobs,
        new_prompt_logprobs=prompt_logprobs,
        new_sampling_mask=sampling_mask,
        finish_reason=None if status is None else FINISH_REASONS[status],
        stop_reason=req.stop_reason if status is not None else None,
        num_cached_tokens=cached,
        num_cache_creation_tokens=created,
        scheduled_time=scheduled,
        num_preemptions=preempted,
        routed_experts=None if status is None else _routed(req),
    )


def _routed(req: Request) -> RoutedExperts | None:
    """A finished request's routed experts: positions from ``routed_experts_prompt_start``
    (at most the prompt's length) up to but not including its last token, which never
    went through the model."""
    if req.routed_experts is None:
        return None
    start = min(req.sampling_params.routed_experts_prompt_start, len(req.prompt_token_ids))
    return req.routed_experts.take(start, req.num_tokens - 1)


def cache_created(req: Request, cache_block: int) -> int:
    """The prompt tokens ``req`` computed into prefix-cache blocks, as vLLM counts them when
    its prefill ends: the prompt's tokens in full hashed blocks (registered in the cache as
    their blocks fill) minus those it found there; 0 without prefix caching
    (``cache_block`` 0) or for a prompt with no block hashes (prompt embeddings)."""
    if not cache_block:
        return 0
    full = min(req.num_prompt_tokens // cache_block, len(req.block_hashes)) * cache_block
    return max(0, full - max(req.num_cached_tokens, 0))


def computed_prompt(req: Request) -> int:
    """The prompt tokens ``req`` computed itself (those found in the prefix cache or brought
    by the KV connector aside): what its prefill adds to vLLM's ``iteration_tokens``."""
    return max(0, req.num_prompt_tokens - max(req.num_cached_tokens, 0))


def pooled_output(req: Request, data: PooledData) -> EngineCoreOutput:
    """Report a pooling request's result (its last chunk ran): it finishes stopped."""
    return EngineCoreOutput(
        req_id=req.request_id,
        new_token_ids=[],
        finish_reason=FINISH_REASONS[RequestStatus.FINISHED_STOPPED],
        num_cached_tokens=max(req.num_cached_tokens, 0),
        scheduled_time=req.first_scheduled_time,
        pooled=data,
    )
