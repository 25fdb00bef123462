"""What callers receive: ``RequestOutput`` and ``CompletionOutput``, with vLLM's fields.

These are the public result types of ``AsyncEngine.generate`` and ``LLM.generate``; the
output processor builds them, the HTTP layer renders them.
"""

from __future__ import annotations

import msgspec

from actorllm.core.logprob_types import (
    FlatLogprobs,
    Logprob,
    PromptLogprobs,
    SampleLogprobs,
    concat_logprobs,
)
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

    def add(self, next_output: RequestOutput, aggregate: bool) -> None:
        """vLLM's: fold a later output of this request into this one, in place. With
        ``aggregate`` each sample's new text, token ids and logprobs are appended (DELTA
        pieces into one) and its latest cumulative logprob, finish and stop reasons and
        weight versions kept; without, a sample's output is replaced by the newer one. A
        sample new to this output is appended; finished once either output is."""
        self.finished |= next_output.finished
        if next_output.error is not None:
            self.error = next_output.error
        for nxt in next_output.outputs:
            for i, cur in enumerate(self.outputs):
                if cur.index != nxt.index:
                    continue
                if not aggregate:
                    self.outputs[i] = nxt
                    break
                cur.text += nxt.text
                cur.token_ids = [*cur.token_ids, *nxt.token_ids]
                if nxt.logprobs:
                    cur.logprobs = (
                        nxt.logprobs
                        if cur.logprobs is None
                        else concat_logprobs(cur.logprobs, nxt.logprobs)
                    )
                if cur.token_weight_versions is not None and nxt.token_weight_versions:
                    cur.token_weight_versions += nxt.token_weight_versions
                cur.cumulative_logprob = nxt.cumulative_logprob
                cur.weight_versions = nxt.weight_versions  # the final output's spans
                cur.finish_reason = nxt.finish_reason
                cur.stop_reason = nxt.stop_reason
                break
            else:
                self.outputs.append(nxt)
