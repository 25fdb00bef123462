"""The request fields that completions and chat completions share: sampling, stopping,
streaming, scheduling and structured outputs (OpenAI's and vLLM's extensions)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from actorllm.core.repetition import RepetitionDetectionParams
from actorllm.entrypoints.openai.protocol.bounds import (
    MAX_I32,
    Bias,
    NonEmptyStr,
    NumLogprobs,
    NumSamples,
    Penalty,
    Seed,
    TokenId,
    TokenIdKey,
)
from actorllm.entrypoints.openai.protocol.response_format import (
    ResponseFormat,
    StructuredOutputsField,
)


class StreamOptions(msgspec.Struct, kw_only=True):
    include_usage: bool = False
    continuous_usage_stats: bool = False  # usage on every chunk (vLLM)


class SamplingFields(msgspec.Struct, kw_only=True):
    """Fields common to both request kinds (OpenAI's and vLLM's extensions)."""

    model: str | None = None
    n: NumSamples = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    # vLLM: batch this many tokens into each streamed chunk (raises --stream-interval).
    stream_interval: Annotated[int, msgspec.Meta(ge=1, le=MAX_I32)] | None = None
    stop: NonEmptyStr | list[NonEmptyStr] | None = None
    seed: Seed | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0.0)] | None = None
    top_p: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] | None = None
    presence_penalty: Penalty = 0.0
    frequency_penalty: Penalty = 0.0
    logit_bias: dict[TokenIdKey, Bias] | None = None
    user: str | None = None  # the end user's id, for the caller's own tracking: asks nothing of us
    # vLLM extensions
    top_k: Annotated[int, msgspec.Meta(ge=-1, le=MAX_I32)] | None = None
    min_p: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] | None = None
    repetition_penalty: Annotated[float, msgspec.Meta(gt=0.0, le=2.0**31)] | None = None
    min_tokens: Annotated[
        int, msgspec.Meta(ge=0, le=MAX_I32, extra_json_schema={"x-served": "max_tokens"})
    ] = 0
    ignore_eos: bool = False
    # vLLM: beam search with ``n`` beams, ranked by logprob / length ** length_penalty
    # (entrypoints/openai/beam_request.py).
    use_beam_search: bool = False
    length_penalty: float = 1.0
    # vLLM: arguments for the custom logits processors (SamplingParams.extra_args).
    vllm_xargs: dict[str, str | int | float | list[str | int | float]] | None = None
    stop_token_ids: list[TokenId] | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    allowed_token_ids: Annotated[list[TokenId], msgspec.Meta(min_length=1)] | None = None
    bad_words: list[NonEmptyStr] | None = None
    # vLLM: end the reasoning once it is this many tokens long (-1: unlimited); needs
    # --reasoning-parser or --reasoning-config. The range is stated in the document only:
    # SamplingParams checks it in vLLM's words.
    thinking_token_budget: (
        Annotated[int, msgspec.Meta(extra_json_schema={"minimum": -1})] | None
    ) = None
    # vLLM reads a JSON boolean here as 0 / 1 (pydantic's lax int): __post_init__ does too.
    prompt_logprobs: NumLogprobs | bool | None = None
    # vLLM: skip the first N prompt tokens of the returned routed experts
    # (--enable-return-routed-experts); past the prompt's length it is a 400.
    routed_experts_prompt_start: Annotated[int, msgspec.Meta(ge=0, le=MAX_I32)] = 0
    # vLLM: sample with the server's --watermark-config (None: yes if there is one; False:
    # opt out; True without one runs unwatermarked, with a warning in the server's log).
    watermarking: bool | None = None
    # vLLM: stop early when the output ends in a repeated N-gram (finish_reason "repetition").
    repetition_detection: RepetitionDetectionParams | None = None
    # vLLM: these ids' logprobs at each output position (with logprobs set), not the top-k.
    logprob_token_ids: (
        Annotated[
            list[TokenId],
            msgspec.Meta(
                max_length=128,
                description="Logprobs of exactly these token ids at each output position, "
                "besides the sampled token's (vLLM). Requires `logprobs` to be set.",
            ),
        ]
        | None
    ) = None
    # -1: the last max_model_len - 1 tokens; k >= 1: the last k (0 is refused).
    truncate_prompt_tokens: Annotated[int, msgspec.Meta(ge=-1, le=MAX_I32)] | None = None
    # Which end truncate_prompt_tokens cuts: "left" keeps the last k (None: the same),
    # "right" the first k (vLLM).
    truncation_side: Literal["left", "right"] | None = None
    return_tokens_as_token_ids: bool = False
    return_token_ids: bool = False  # the response carries prompt and output token ids
    # Only requests with the same salt share prefix-cache blocks (tenant isolation).
    cache_salt: NonEmptyStr | None = None
    priority: Annotated[
        int, msgspec.Meta(ge=-MAX_I32, le=MAX_I32, extra_json_schema={"x-served": "priority"})
    ] = 0
    request_id: Annotated[str, msgspec.Meta(min_length=1, max_length=256)] | None = None
    # vLLM: a conversation's id, used only to label the KV cache events it publishes
    # (--kv-events-config); this server publishes none, so like ``user`` it asks nothing.
    session_id: str | None = None
    # vLLM's render endpoints' options (/v1/*/render); vLLM ignores them on the generation
    # endpoints, and so does this server, which has no render endpoints.
    return_token_offsets: bool | None = False
    mm_payload: Literal["tensors", "none"] = "tensors"
    return_mm_kwargs: bool | None = None
    # Structured outputs (docs/structured_outputs.md): one of these at most.
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputsField | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: Annotated[list[str], msgspec.Meta(min_length=1)] | None = None
    guided_grammar: NonEmptyStr | None = None
    guided_decoding_backend: Literal["auto", "xgrammar", "guidance"] | None = None
    guided_whitespace_pattern: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.prompt_logprobs, bool):
            self.prompt_logprobs = int(self.prompt_logprobs)
