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
from actorllm.core.routed_experts import RoutedExperts

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


class SamplingMask(msgspec.Struct):
    """vLLM's per-token sampling support sets, aligned with a completion's token ids: each
    inner list holds the vocabulary ids that survived top-k / top-p / min-p filtering for
    that generated token (ascending; --return-sampling-mask)."""

    token_ids: list[list[int]]


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
    # vLLM's: each token's surviving vocabulary ids (--return-sampling-mask), else None.
    sampling_mask: SamplingMask | None = None
    # vLLM's ``routed_experts`` [tokens, layers, top_k] (--enable-return-routed-experts):
    # on the final output only; ``np.asarray`` gives vLLM's array.
    routed_experts: RoutedExperts | None = None

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
    # Prompt tokens the request computed and wrote to the prefix cache (vLLM's).
    num_cache_creation_tokens: int = 0
    metrics: RequestMetrics | None = None
    # Set when finish_reason == "error": a human-readable reason.
    error: str | None = None
    # A pooling request's result (``AsyncEngine.encode`` turns it into a
    # ``PoolingRequestOutput``); None for generation.
    pooled: PooledData | None = None

    def add(self, next_output: RequestOutput, aggregate: bool) -> None:
        """vLLM's: fold a later output of this request into this one, in place: the one
        fold of the engine (``step_outputs.merge_outputs`` is this on a copy), so DELTA
        outputs folded in order equal the request's FINAL_ONLY output.

        With ``aggregate`` (DELTA pieces) each sample's per-token fields are appended
        (:func:`join_completions`) and its prompt logprobs too; without, a sample's output
        is replaced by the newer one. A sample new to this output is appended. Finished
        once either output is; the newer error, metrics, cached and cache-written token
        counts and pooled result win."""
        self.finished |= next_output.finished
        if next_output.error is not None:
            self.error = next_output.error
        if next_output.metrics is not None:
            self.metrics = next_output.metrics
        if next_output.pooled is not None:
            self.pooled = next_output.pooled
        # (an output built without the counts, e.g. an error's, keeps the earlier ones)
        self.num_cached_tokens = next_output.num_cached_tokens or self.num_cached_tokens
        self.num_cache_creation_tokens = (
            next_output.num_cache_creation_tokens or self.num_cache_creation_tokens
        )
        nxt_prompt = next_output.prompt_logprobs
        if nxt_prompt is not None:
            old_prompt = self.prompt_logprobs
            self.prompt_logprobs = (
                concat_logprobs(old_prompt, nxt_prompt)
                if aggregate and old_prompt is not None
                else nxt_prompt
            )
        outputs = self.outputs
        for nxt in next_output.outputs:
            for i, cur in enumerate(outputs):
                if cur.index == nxt.index:
                    outputs[i] = join_completions(cur, nxt) if aggregate else nxt
                    break
            else:
                outputs.append(nxt)


def join_completions(a: CompletionOutput, b: CompletionOutput) -> CompletionOutput:
    """Two DELTA pieces of one sample, ``a`` then ``b``, as one new piece (neither is
    changed). The per-token fields are appended: text, token ids, logprobs and
    ``token_weight_versions`` (a piece without versions counts None for each of its
    tokens, as the final output does for tokens before the first version reported); the
    newer cumulative logprob, finish and stop reasons and spans (final only) are kept."""
    logprobs = b.logprobs
    if a.logprobs is not None:
        logprobs = concat_logprobs(a.logprobs, b.logprobs)
    versions = b.token_weight_versions
    if a.token_weight_versions is not None or versions is not None:
        versions = [
            *(a.token_weight_versions or [None] * len(a.token_ids)),
            *(versions or [None] * len(b.token_ids)),
        ]
    mask = b.sampling_mask
    if a.sampling_mask is not None:
        mask = SamplingMask(a.sampling_mask.token_ids + (mask.token_ids if mask else []))
    return msgspec.structs.replace(
        b,
        text=a.text + b.text,
        token_ids=a.token_ids + b.token_ids,
        logprobs=logprobs,
        token_weight_versions=versions,
        sampling_mask=mask,
    )
