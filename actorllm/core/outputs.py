"""What callers receive: ``RequestOutput`` and ``CompletionOutput``, with vLLM's fields.

These are the public result types of ``AsyncEngine.generate`` and ``LLM.generate``; the
output processor builds them, the HTTP layer renders them.
"""

from __future__ import annotations

import msgspec


class Logprob(msgspec.Struct, kw_only=True):
    logprob: float
    rank: int | None = None  # 1-based rank in the vocabulary distribution
    decoded_token: str | None = None


# One dict per position: {token_id: Logprob}; the chosen token is always present.
SampleLogprobs = list[dict[int, Logprob]]
# Prompt logprobs: position 0 has no logprob (None).
PromptLogprobs = list[dict[int, Logprob] | None]


class CompletionOutput(msgspec.Struct, kw_only=True):
    index: int  # which of the n samples
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None = None
    logprobs: SampleLogprobs | None = None
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
    stop_reason: int | str | None = None  # the stop token id or stop string that ended it

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


def merge_outputs(unread: RequestOutput, new: RequestOutput, *, delta: bool) -> None:
    """Fold ``new`` into ``unread``, the same request's previous output that its caller has
    not read yet (vLLM's ``RequestOutput.add``): the caller then reads one output that says
    what the two would have said in turn.

    ``delta`` (``RequestOutputKind.DELTA``): each sample's text, token ids and logprobs are
    concatenated, and the prompt logprobs' pieces; otherwise (``CUMULATIVE``) each sample
    ``new`` carries replaces the old one. Either way the newer request-level fields win
    (finished, error, cached tokens, metrics) and the newer sample-level ones
    (cumulative logprob, finish and stop reason). Samples keep their order by index.
    ``unread`` is changed in place; ``new`` is left as it is.
    """
    if delta:
        if new.prompt_logprobs is not None:
            old = unread.prompt_logprobs
            unread.prompt_logprobs = (
                new.prompt_logprobs if old is None else old + new.prompt_logprobs
            )
    else:
        unread.prompt_logprobs = new.prompt_logprobs
    unread.finished = new.finished
    unread.num_cached_tokens = new.num_cached_tokens
    unread.metrics = new.metrics
    unread.error = new.error
    outputs = unread.outputs
    for piece in new.outputs:
        slot = next((i for i, c in enumerate(outputs) if c.index == piece.index), None)
        if slot is None:
            outputs.append(_copy_completion(piece))
            if len(outputs) > 1 and outputs[-2].index > piece.index:
                outputs.sort(key=lambda c: c.index)
            continue
        if not delta:
            outputs[slot] = _copy_completion(piece)
            continue
        seen = outputs[slot]
        seen.text += piece.text
        seen.token_ids = seen.token_ids + piece.token_ids
        if piece.logprobs is not None:
            seen.logprobs = (
                piece.logprobs if seen.logprobs is None else seen.logprobs + piece.logprobs
            )
        seen.cumulative_logprob = piece.cumulative_logprob
        seen.finish_reason = piece.finish_reason
        seen.stop_reason = piece.stop_reason


def _copy_completion(c: CompletionOutput) -> CompletionOutput:
    """A copy whose lists ``merge_outputs`` may replace without touching ``c``."""
    return CompletionOutput(
        index=c.index,
        text=c.text,
        token_ids=list(c.token_ids),
        cumulative_logprob=c.cumulative_logprob,
        logprobs=None if c.logprobs is None else list(c.logprobs),
        finish_reason=c.finish_reason,
        stop_reason=c.stop_reason,
    )
