"""What callers receive: ``RequestOutput`` and ``CompletionOutput``, with vLLM's fields.

These are the public result types of ``AsyncEngine.generate`` and ``LLM.generate``; the
output processor builds them, the HTTP layer renders them.
"""

from __future__ import annotations

import msgspec

from actorllm.core.logprob_types import FlatLogprobs, Logprob, PromptLogprobs, SampleLogprobs
from actorllm.core.pooling_params import PooledData

__all__ = [
    "CompletionOutput",
    "FlatLogprobs",
    "Logprob",
    "PromptLogprobs",
    "RequestMetrics",
    "RequestOutput",
    "SampleLogprobs",
    "WeightVersionSpan",
]


class WeightVersionSpan(msgspec.Struct, frozen=True):
    """Output tokens ``[start, end)`` were sampled by the weights labelled ``version``
    (vLLM's; ``finish_weight_update(weight_version=...)`` names versions)."""

    version: str
    start: int
    end: int


class CompletionOutput(msgspec.Struct, kw_only=True):
    index: int  # which of the n samples
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None = None
    logprobs: SampleLogprobs | None = None
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error" | "repetition"
    stop_reason: int | str | None = None  # the stop token id or stop string that ended it
    # vLLM's: contiguous spans of token indexes by weight version; on the final output only.
    weight_versions: list[WeightVersionSpan] | None = None
    # Ours: the weight version that produced each of ``token_ids`` (same length; DELTA
    # outputs: this delta's tokens); None for a token replayed after an output-processor
    # restart (its version is not known).
    token_weight_versions: list[str | None] | None = None

    def finished(self) -> bool:
        return self.finish_reason is not None


class RequestMetrics(msgspec.Struct, kw_only=True):
    arrival_time: float
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    last_token_time: float | None = None
    finished_time: float | None = None


class RequestOutput(msgspec.Struct, kw_only=True):
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    prompt_logprobs: PromptLogprobs | None
    outputs: list[CompletionOutput]
    finished: bool
    num_cached_tokens: int = 0
    metrics: RequestMetrics | None = None
    # Set when finish_reason == "error": a human-readable reason.
    error: str | None = None
    # A pooling request's result (``AsyncEngine.encode`` turns it into a
    # ``PoolingRequestOutput``); None for generation.
    pooled: PooledData | None = None
