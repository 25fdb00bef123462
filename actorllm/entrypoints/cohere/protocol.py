"""Cohere's Chat v2 bodies as vLLM 0.32 declares them (``cohere/protocol.py``, whose wire
types are the ``cohere`` SDK's).

Messages and content blocks are tagged unions (``role``, ``type``); OpenAI's ``developer``
role is read as ``system`` before they decode (:func:`developer_as_system`). Fields vLLM
declares for its own extensions: ``chat_template_kwargs`` and ``watermarking`` are
here; ``kv_transfer_params`` is left out, so ``fields.UNSUPPORTED`` refuses them by name as on
the chat route. ``thinking.type``, ``safety_mode`` and ``citation_options.mode`` take any
string, as the SDK's open enums do: they reach the chat template as variables.

The response side is vLLM's ``exclude_none`` dump: a field that is None is left out
(``omit_defaults``). Token counts are floats on the wire, as Cohere declares them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from actorllm.entrypoints.anthropic.protocol import StopSequences
from actorllm.entrypoints.openai.protocol.bounds import MAX_I32, NonEmptyStr, Penalty, Seed

# --- request: content blocks ----------------------------------------------------------------


class CohereText(msgspec.Struct, kw_only=True, tag_field="type", tag="text"):
    text: str


class CohereImageUrl(msgspec.Struct, kw_only=True):
    url: str
    detail: str | None = None


class CohereImageContent(msgspec.Struct, kw_only=True, tag_field="type", tag="image_url"):
    image_url: CohereImageUrl


class CohereThinking(msgspec.Struct, kw_only=True, tag_field="type", tag="thinking"):
    thinking: str


class CohereDocument(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A document the model may cite (top-level ``documents``, or a tool's result)."""

    data: dict[str, Any]
    id: str | None = None


class CohereDocumentContent(msgspec.Struct, kw_only=True, tag_field="type", tag="document"):
    document: CohereDocument


# --- request: messages ----------------------------------------------------------------------


class CohereToolCallFunction(msgspec.Struct, kw_only=True):
    name: str | None = None
    arguments: str | None = None


class CohereToolCall(msgspec.Struct, kw_only=True):
    id: str
    type: Literal["function"] = "function"
    function: CohereToolCallFunction | None = None


class CohereSystemMessage(msgspec.Struct, kw_only=True, tag_field="role", tag="system"):
    content: str | list[CohereText]


class CohereUserMessage(msgspec.Struct, kw_only=True, tag_field="role", tag="user"):
    content: str | list[CohereText | CohereImageContent]


class CohereAssistantMessage(msgspec.Struct, kw_only=True, tag_field="role", tag="assistant"):
    tool_calls: list[CohereToolCall] | None = None
    tool_plan: str | None = None  # the planning text before tool calls (older Command models)
    content: str | list[CohereText | CohereThinking] | None = None
    # A past answer's citations (the SDK's Citation objects): refused when set, since only
    # Cohere's own prompt renderer writes them into a prompt (to_chat).
    citations: list[dict[str, Any]] | None = None


class CohereToolMessage(msgspec.Struct, kw_only=True, tag_field="role", tag="tool"):
    tool_call_id: str
    content: str | list[CohereText | CohereDocumentContent]


CohereMessage = CohereSystemMessage | CohereUserMessage | CohereAssistantMessage | CohereToolMessage


# --- request: options -----------------------------------------------------------------------


class CohereToolFunction(msgspec.Struct, kw_only=True):
    name: str
    description: str | None = None
    parameters: dict[str, Any]


class CohereTool(msgspec.Struct, kw_only=True):
    type: Literal["function"] = "function"
    function: CohereToolFunction


class CohereTextFormat(msgspec.Struct, kw_only=True, tag_field="type", tag="text"):
    pass


class CohereJsonFormat(msgspec.Struct, kw_only=True, tag_field="type", tag="json_object"):
    json_schema: dict[str, Any] | None = None


class CohereThinkingOption(msgspec.Struct, kw_only=True, omit_defaults=True):
    type: str  # "enabled" or "disabled" (an open enum in the SDK)
    token_budget: int | None = None


class CohereCitationOptions(msgspec.Struct, kw_only=True, omit_defaults=True):
    mode: str | None = None  # ENABLED, DISABLED, FAST, ACCURATE, OFF (an open enum)


class CohereChatRequest(msgspec.Struct, kw_only=True):
    """``POST /cohere/v2/chat``."""

    model: NonEmptyStr
    messages: Annotated[list[CohereMessage], msgspec.Meta(min_length=1)]
    stream: bool | None = False
    # tools
    tools: list[CohereTool] | None = None
    strict_tools: bool | None = None
    tool_choice: Literal["REQUIRED", "NONE"] | None = None
    # grounding
    documents: list[str | CohereDocument] | None = None
    citation_options: CohereCitationOptions | None = None
    # output
    response_format: CohereTextFormat | CohereJsonFormat | None = None
    safety_mode: str | None = None  # CONTEXTUAL, STRICT, NONE (an open enum)
    max_tokens: Annotated[int, msgspec.Meta(ge=0, le=MAX_I32)] | None = None
    stop_sequences: StopSequences | None = None
    # sampling
    temperature: Annotated[float, msgspec.Meta(ge=0.0)] | None = None
    seed: Seed | None = None
    frequency_penalty: Penalty | None = None
    presence_penalty: Penalty | None = None
    k: Annotated[int, msgspec.Meta(ge=-1, le=MAX_I32)] | None = None
    p: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] | None = None
    logprobs: bool | None = None
    # reasoning
    thinking: CohereThinkingOption | None = None
    # scheduling
    priority: Annotated[int, msgspec.Meta(ge=-MAX_I32, le=MAX_I32)] | None = None
    # vLLM's extensions
    chat_template_kwargs: dict[str, Any] | None = None
    watermarking: bool | None = None  # the server's --watermark-config: None/True on


def developer_as_system(body: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's ``developer`` role (any case) as ``system``, which is what it means; vLLM
    rewrites it before the SDK's role union reads the messages."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body
    fixed = [
        {**m, "role": "system"}
        if isinstance(m, dict) and str(m.get("role", "")).lower() == "developer"
        else m
        for m in messages
    ]
    return {**body, "messages": fixed}


# --- response -------------------------------------------------------------------------------

FinishReason = Literal["COMPLETE", "STOP_SEQUENCE", "MAX_TOKENS", "TOOL_CALL", "ERROR", "TIMEOUT"]


class CohereTextOut(msgspec.Struct, kw_only=True, tag_field="type", tag="text"):
    text: str


class CohereThinkingOut(msgspec.Struct, kw_only=True, tag_field="type", tag="thinking"):
    thinking: str


class CohereToolCallOut(msgspec.Struct, kw_only=True):
    id: str
    type: Literal["function"] = "function"
    function: CohereToolCallFunction


class CohereAssistantOut(msgspec.Struct, kw_only=True, omit_defaults=True):
    role: Literal["assistant"]  # no default: omit_defaults would leave it out
    tool_calls: list[CohereToolCallOut] | None = None
    tool_plan: str | None = None
    content: list[CohereTextOut | CohereThinkingOut] | None = None


class CohereTokens(msgspec.Struct, kw_only=True):
    input_tokens: float
    output_tokens: float


class CohereUsage(msgspec.Struct, kw_only=True, omit_defaults=True):
    """vLLM's: the billed units are the tokens (nothing is billed apart)."""

    billed_units: CohereTokens
    tokens: CohereTokens
    cached_tokens: float | None = None


class CohereLogprob(msgspec.Struct, kw_only=True):
    text: str
    token_ids: list[int]
    logprobs: list[float]


class CohereChatResponse(msgspec.Struct, kw_only=True, omit_defaults=True):
    id: str
    finish_reason: FinishReason
    message: CohereAssistantOut
    usage: CohereUsage | None = None
    logprobs: list[CohereLogprob] | None = None


class CohereError(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Cohere's error body: the message, and the request's id when it has one."""

    message: str
    id: str | None = None
