"""The ``EngineCoreOutput`` that reports one request's share of a step's results: the
tokens the scheduler appended (up to the first that stopped it), or a pooled result.

The scheduler appends the tokens and finishes the request; this only words the report.
"""

from __future__ import annotations

from actorllm.core.engine_core_output import EngineCoreOutput
from actorllm.core.model_runner_output import TokenLogprobs
from actorllm.core.pooling_params import PooledData
from actorllm.core.request import FINISH_REASONS, Request, RequestStatus


def token_output(
    req: Request,
    tokens: list[int],
    status: RequestStatus | None,
    logprobs: list[TokenLogprobs] | None,
    prompt_logprobs: list[TokenLogprobs] | None,
) -> EngineCoreOutput:
    """Report ``tokens`` appended to ``req`` (``status``: the finished status they put it
    in, or None; ``logprobs``: one per token, if asked); the request's first report also
    carries its prefix-cache hit and the time it was first scheduled."""
    cached, scheduled = 0, None
    if not req.emitted_first_output:
        req.emitted_first_output = True
        cached, scheduled = max(req.num_cached_tokens, 0), req.first_scheduled_time
    return EngineCoreOutput(
        req_id=req.request_id,
        new_token_ids=tokens,
        new_logprobs=logprobs,
        new_prompt_logprobs=prompt_logprobs,
        finish_reason=None if status is None else FINISH_REASONS[status],
        stop_reason=req.stop_reason if status is not None else None,
        num_cached_tokens=cached,
        scheduled_time=scheduled,
    )


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
