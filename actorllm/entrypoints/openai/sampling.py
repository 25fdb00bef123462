"""OpenAI request fields -> ``SamplingParams``; shared request checks for the serving layers."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.core.structured_outputs_params import StructuredOutputsParams
from actorllm.entrypoints.openai.errors import APIError, bad_request
from actorllm.entrypoints.openai.protocol.chat_request import ChatCompletionRequest
from actorllm.entrypoints.openai.protocol.completion import CompletionRequest
from actorllm.entrypoints.openai.protocol.sampling_fields import SamplingFields
from actorllm.entrypoints.openai.structured_request import (
    client_error,
    structured_outputs_from_body,
    structured_source,
)

# The body fields that carry a structured-outputs constraint (at most one may be set).
STRUCTURED_FIELDS = (
    "response_format",
    "structured_outputs",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
    "guided_decoding_backend",
    "guided_whitespace_pattern",
)


def _structured_body(req: SamplingFields) -> dict[str, Any]:
    return {
        name: msgspec.to_builtins(getattr(req, name))
        for name in STRUCTURED_FIELDS
        if getattr(req, name) is not None
    }


def structured_outputs(req: SamplingFields) -> StructuredOutputsParams | None:
    """The request's output constraint from any of its spellings (a 400 for two)."""
    body = _structured_body(req)
    return structured_outputs_from_body(body) if body else None


def constraint_field(req: SamplingFields, forced_tool: bool = False) -> str | None:
    """The body field a compile error of the request's constraint names: the one the
    client sent it in, or ``tools`` for the schema a forced tool call compiles."""
    return "tools" if forced_tool else structured_source(_structured_body(req))


def check_model(requested: str | None, served: Sequence[str]) -> None:
    """404 for a model this server does not serve (``None`` or ``""`` means the served
    one, as vLLM's); ``served``: every name of the served model (``--served-model-name a
    b``)."""
    if requested and requested not in served:
        raise APIError(404, f"The model `{requested}` does not exist.", "model")


def check_generative(engine: Any) -> None:
    """400 naming ``model`` for a generation request to a pooling model (vLLM serves a
    model one way: ``--runner generate`` or ``pooling``)."""
    if engine.pooling_model is not None:
        raise APIError(
            400,
            f"The model `{engine.model_name}` is a pooling model (runner 'pooling'): it does "
            "not generate text. Use /v1/embeddings, /pooling, /classify, /score or /rerank.",
            "model",
        )


def new_request_id(prefix: str, user_id: str | None) -> str:
    return f"{prefix}-{user_id}" if user_id else f"{prefix}-{uuid.uuid4().hex}"


def _logit_bias(raw: dict[str, float] | None) -> dict[int, float] | None:
    if raw is None:
        return None
    return {int(key): bias for key, bias in raw.items()}  # keys are digits (protocol)


def _params(
    req: SamplingFields,
    *,
    max_tokens: int,
    logprobs: int | None,
    prompt_logprobs: int | None,
    output_kind: RequestOutputKind,
    structured: StructuredOutputsParams | None = None,
    defaults: Mapping[str, float] | None = None,
    logprob_limits: tuple[int, int] | None = None,
) -> SamplingParams:
    """``defaults``: the server's sampling defaults for the fields the request left out
    (vLLM's generation-config defaults); then OpenAI's. ``logprob_limits``: the engine's
    (``max_logprobs``, vocabulary size): more logprobs are a 400 with vLLM's message, and
    -1 (the whole vocabulary) becomes the vocabulary size."""
    d = defaults or {}

    def pick(given: float | None, name: str, openai_default: float) -> Any:  # not max_tokens
        return given if given is not None else d.get(name, openai_default)

    params = SamplingParams(
        n=req.n,
        presence_penalty=req.presence_penalty,
        frequency_penalty=req.frequency_penalty,
        repetition_penalty=pick(req.repetition_penalty, "repetition_penalty", 1.0),
        temperature=pick(req.temperature, "temperature", 1.0),
        top_p=pick(req.top_p, "top_p", 1.0),
        top_k=pick(req.top_k, "top_k", 0),
        min_p=pick(req.min_p, "min_p", 0.0),
        seed=req.seed,
        stop=req.stop,
        stop_token_ids=req.stop_token_ids,
        include_stop_str_in_output=req.include_stop_str_in_output,
        ignore_eos=req.ignore_eos,
        max_tokens=max_tokens,
        min_tokens=req.min_tokens,
        logprobs=None if req.logprob_token_ids else logprobs,
        prompt_logprobs=prompt_logprobs,
        logprob_token_ids=req.logprob_token_ids or None,
        repetition_detection=req.repetition_detection,
        logit_bias=_logit_bias(req.logit_bias),
        allowed_token_ids=req.allowed_token_ids,
        bad_words=req.bad_words,
        thinking_token_budget=req.thinking_token_budget,
        watermarking=req.watermarking,
        routed_experts_prompt_start=req.routed_experts_prompt_start,
        skip_special_tokens=req.skip_special_tokens,
        spaces_between_special_tokens=req.spaces_between_special_tokens,
        truncate_prompt_tokens=req.truncate_prompt_tokens,
        output_kind=output_kind,
        stream_interval=req.stream_interval,
        structured_outputs=structured,
        extra_args=req.vllm_xargs or None,
        skip_clone=True,  # built for this request alone (vLLM's server does the same)
    )
    return params.verify_logprobs(*logprob_limits) if logprob_limits else params


def _max_of(*ks: int | None) -> int | None:
    given = [k for k in ks if k is not None]
    if -1 in given:
        return -1  # the whole vocabulary: more than any count
    return max(given) if given else None


def completion_params(
    req: CompletionRequest,
    *,
    max_tokens: int,
    output_kind: RequestOutputKind,
    defaults: Mapping[str, float] | None = None,
    logprob_limits: tuple[int, int] | None = None,
) -> SamplingParams:
    """Raises SamplingParamsError (400) for invalid combinations."""
    if req.logprob_token_ids and req.logprobs is None:
        raise bad_request(
            "when using `logprob_token_ids`, `logprobs` must be set.", "logprob_token_ids"
        )
    echo_logprobs = req.logprobs if req.echo else None
    return _params(
        req,
        max_tokens=max_tokens,
        logprobs=req.logprobs,
        prompt_logprobs=_max_of(req.prompt_logprobs, echo_logprobs),
        output_kind=output_kind,
        structured=structured_outputs(req),
        defaults=defaults,
        logprob_limits=logprob_limits,
    )


def chat_max_tokens(req: ChatCompletionRequest) -> int | None:
    return req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens


def chat_params(
    req: ChatCompletionRequest,
    *,
    max_tokens: int,
    output_kind: RequestOutputKind,
    forced_tool_schema: dict[str, Any] | None = None,
    strict_tools_tag: str | None = None,
    keep_special_tokens: bool = False,
    defaults: Mapping[str, float] | None = None,
    logprob_limits: tuple[int, int] | None = None,
) -> SamplingParams:
    """``forced_tool_schema``: the JSON schema that ``tool_choice`` required / named forces
    (compact JSON: arguments are for programs); ``strict_tools_tag``: the structural tag
    that holds tool_choice auto's calls to strict functions' parameters;
    ``keep_special_tokens``: the tool parser reads special tokens (Mistral's
    ``[TOOL_CALLS]``)."""
    if req.top_logprobs not in (None, 0) and not req.logprobs:  # vLLM: 0 asks nothing
        raise bad_request(
            "when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs"
        )
    if req.logprob_token_ids and not req.logprobs:
        raise bad_request(
            "when using `logprob_token_ids`, `logprobs` must be set to true.",
            "logprob_token_ids",
        )
    structured = structured_outputs(req)
    if forced_tool_schema is not None:
        if structured is not None:
            raise bad_request(
                "tool_choice required or a named function cannot be combined with "
                "response_format / structured outputs.",
                "tool_choice",
            )
        with client_error("tools"):  # a function's parameters that are not a schema
            structured = StructuredOutputsParams(
                json=forced_tool_schema, disable_any_whitespace=True
            )
    elif strict_tools_tag is not None:
        if structured is not None:
            raise bad_request(
                'tools with "strict": true cannot be combined with response_format / '
                "structured outputs.",
                "tools",
            )
        with client_error("tools"):
            structured = StructuredOutputsParams(structural_tag=strict_tools_tag)
    params = _params(
        req,
        max_tokens=max_tokens,
        logprobs=(req.top_logprobs or 0) if req.logprobs else None,
        prompt_logprobs=req.prompt_logprobs,
        output_kind=output_kind,
        structured=structured,
        defaults=defaults,
        logprob_limits=logprob_limits,
    )
    return params.clone(skip_special_tokens=False) if keep_special_tokens else params
