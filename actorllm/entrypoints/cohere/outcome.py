"""How a chat ended, in Cohere's terms: its finish reason and its usage (vLLM's
``_map_finish_reason`` and ``_build_usage``), for the answer and for ``message-end``."""

from __future__ import annotations

from actorllm.entrypoints.cohere.protocol import CohereTokens, CohereUsage, FinishReason
from actorllm.entrypoints.openai.protocol.usage import UsageInfo

_FINISH: dict[str | None, FinishReason] = {
    "stop": "COMPLETE",
    "length": "MAX_TOKENS",
    "tool_calls": "TOOL_CALL",
    "error": "ERROR",
}


def finish_reason_of(reason: str | None, stop_reason: int | str | None) -> FinishReason:
    """A chat finish reason as Cohere's: a matched stop string (a str; a stop token id
    is not one) is STOP_SEQUENCE; EOS and reasons Cohere has no word for are COMPLETE.

    >>> finish_reason_of("stop", "END"), finish_reason_of("stop", 2)
    ('STOP_SEQUENCE', 'COMPLETE')
    """
    if reason == "stop" and isinstance(stop_reason, str):
        return "STOP_SEQUENCE"
    return _FINISH.get(reason, "COMPLETE")


def usage_of(info: UsageInfo) -> CohereUsage:
    """Billed units and tokens are both the prompt's and the output's token counts;
    ``cached_tokens`` the prompt tokens the prefix cache served."""
    tokens = CohereTokens(
        input_tokens=float(info.prompt_tokens), output_tokens=float(info.completion_tokens)
    )
    details = info.prompt_tokens_details
    cached = details.cached_tokens if details is not None else None
    return CohereUsage(
        billed_units=tokens,
        tokens=tokens,
        cached_tokens=None if cached is None else float(cached),
    )
