"""vLLM's token-in/token-out wire: the rendered request that ``/render`` answers and
``/inference/v1/generate`` takes, and generate's answers (whole and streamed).

Field names and order are vLLM's. ``sampling_params`` stays vLLM's serialised form here
(``vllm_sampling`` reads and writes it); the multimodal fields (``features``,
``content_parts``) and encoder-cache transfer are refused when set: text models only.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

import msgspec

from actorllm.entrypoints.openai.protocol.logprobs import ChatLogProbs
from actorllm.entrypoints.openai.protocol.sampling_fields import StreamOptions
from actorllm.entrypoints.openai.protocol.usage import UsageInfo

TokenId = Annotated[int, msgspec.Meta(ge=0)]
OutputMode = Literal["tokens", "text"]


class ReasoningParserKwargs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    chat_template_kwargs: dict[str, Any] = msgspec.field(default_factory=dict)


class GenerateRequest(msgspec.Struct, kw_only=True):
    """One prompt's engine request, rendered: vLLM's ``GenerateRequest``."""

    request_id: str = msgspec.field(default_factory=lambda: uuid.uuid4().hex)
    token_ids: Annotated[list[TokenId], msgspec.Meta(min_length=1)]
    # return_token_offsets: each id's span in the rendered text (informational: not read)
    token_offsets: list[tuple[int, int]] | None = None
    features: dict[str, Any] | None = None  # multimodal: refused
    content_parts: list[dict[str, Any]] | None = None  # multimodal: refused
    sampling_params: dict[str, Any]  # vLLM's serialised SamplingParams
    model: str | None = None
    reasoning_ended: bool | None = None
    reasoning_parser_kwargs: ReasoningParserKwargs | None = None
    return_token_ids: bool | None = None
    output_mode: OutputMode = "tokens"
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    cache_salt: Annotated[str, msgspec.Meta(min_length=1, max_length=1024)] | None = None
    priority: Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)] = 0
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None


class GenerateLogProb(msgspec.Struct, kw_only=True):
    """One (token id, logprob) candidate: ids, not strings (no tokenizer needed)."""

    token_id: int
    logprob: float
    rank: int | None = None


class GenerateLogProbsContent(GenerateLogProb, kw_only=True):
    """The sampled token at one position and its top candidates, in the engine's order."""

    top_logprobs: list[GenerateLogProb] = msgspec.field(default_factory=list)


class GenerateLogProbs(msgspec.Struct, kw_only=True):
    content: list[GenerateLogProbsContent] | None = None


class GenerateChoice(msgspec.Struct, kw_only=True):
    """A whole choice (``output_mode`` tokens; text adds ``text``, OpenAI logprobs)."""

    index: int
    finish_reason: str | None = "stop"
    stop_reason: int | str | None = None
    token_ids: list[TokenId] | None = None
    routed_experts: str | None = None
    sampling_mask: list[list[int]] | None = None
    weight_versions: list[Any] | None = None
    logprobs: GenerateLogProbs | None = None


class GenerateTextChoice(msgspec.Struct, kw_only=True):
    index: int
    finish_reason: str | None = "stop"
    stop_reason: int | str | None = None
    token_ids: list[TokenId] | None = None
    routed_experts: str | None = None
    sampling_mask: list[list[int]] | None = None
    weight_versions: list[Any] | None = None
    text: str = ""
    logprobs: ChatLogProbs | None = None


class SpeculativeDecodingMetrics(msgspec.Struct, kw_only=True):
    """One request's speculative-decoding acceptance (vLLM's; experimental there)."""

    mean_acceptance_length: float
    draft_acceptance_rate: float
    acceptance_histogram: list[int]  # [j]: verify steps that accepted exactly j drafts
    num_spec_steps: int
    num_accepted_draft_tokens: int
    num_draft_tokens: int
    num_spec_tokens: int
    per_step_accepted: list[int] | None = None
    per_step_drafted: list[int] | None = None


class PerRequestMetrics(msgspec.Struct, kw_only=True):
    """vLLM's per-request ``metrics`` of a generate answer (every field, null when unknown);
    derender passes them on."""

    time_to_first_token_ms: float | None = None
    generation_time_ms: float | None = None
    queue_time_ms: float | None = None
    mean_itl_ms: float | None = None
    tokens_per_second: float | None = None
    speculative_decoding: SpeculativeDecodingMetrics | None = None


class GenerateResponse(msgspec.Struct, kw_only=True):
    """``/inference/v1/generate``'s whole answer (``stream`` false); ``output_mode`` text:
    :class:`GenerateTextResponse`."""

    request_id: str
    model: str | None = None
    created: int | None = None
    usage: UsageInfo | None = None
    prompt_logprobs: list[dict[str, Any] | None] | None = None
    prompt_token_id_logprobs: str | None = None
    prompt_token_ids: list[TokenId] | None = None
    mm_placeholders: dict[str, Any] | None = None
    metrics: PerRequestMetrics | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    output_mode: OutputMode = "tokens"
    choices: list[GenerateChoice] = msgspec.field(default_factory=list)


class GenerateTextResponse(GenerateResponse, kw_only=True):
    output_mode: OutputMode = "text"
    choices: list[GenerateTextChoice] = msgspec.field(default_factory=list)  # type: ignore[assignment]


class GenerateStreamChoice(msgspec.Struct, kw_only=True):
    """One choice's delta in a streamed chunk (``output_mode`` tokens)."""

    index: int
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[TokenId] | None = None
    routed_experts: str | None = None
    sampling_mask: list[list[int]] | None = None
    weight_versions: list[Any] | None = None
    logprobs: GenerateLogProbs | None = None


class GenerateTextStreamChoice(msgspec.Struct, kw_only=True):
    index: int
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[TokenId] | None = None
    routed_experts: str | None = None
    sampling_mask: list[list[int]] | None = None
    weight_versions: list[Any] | None = None
    text: str = ""
    logprobs: ChatLogProbs | None = None


class GenerateStreamResponse(msgspec.Struct, kw_only=True):
    """One SSE chunk of a streamed generate (``prompt_token_ids`` on the first only)."""

    request_id: str
    usage: UsageInfo | None = None
    prompt_token_ids: list[TokenId] | None = None
    mm_placeholders: dict[str, Any] | None = None
    metrics: PerRequestMetrics | None = None
    output_mode: OutputMode = "tokens"
    choices: list[GenerateStreamChoice] = msgspec.field(default_factory=list)


class GenerateTextStreamResponse(GenerateStreamResponse, kw_only=True):
    output_mode: OutputMode = "text"
    choices: list[GenerateTextStreamChoice] = msgspec.field(default_factory=list)  # type: ignore[assignment]


class AbortRequests(msgspec.Struct, kw_only=True):
    request_ids: list[str] | str
