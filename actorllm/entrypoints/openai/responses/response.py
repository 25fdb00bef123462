"""The response object (``"object": "response"``), its output items and usage, as vLLM
0.32 returns them (``ResponsesResponse``); every field is encoded, ``null`` included."""

from __future__ import annotations

import time
from typing import Any, Literal

import msgspec

from actorllm.entrypoints.openai.responses.request import (
    FunctionTool,
    Metadata,
    Reasoning,
    TextConfig,
    ToolChoice,
)

Status = Literal["completed", "failed", "in_progress", "cancelled", "queued", "incomplete"]


class TopLogprob(msgspec.Struct, kw_only=True):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(msgspec.Struct, kw_only=True):
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TopLogprob] = msgspec.field(default_factory=list)


class OutputTextPart(msgspec.Struct, kw_only=True, tag_field="type", tag="output_text"):
    text: str
    annotations: list[Any] = msgspec.field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None


class OutputMessage(msgspec.Struct, kw_only=True, tag_field="type", tag="message"):
    id: str
    content: list[OutputTextPart]
    role: Literal["assistant"] = "assistant"
    status: Literal["in_progress", "completed", "incomplete"] = "completed"


class ReasoningTextPart(msgspec.Struct, kw_only=True, tag_field="type", tag="reasoning_text"):
    text: str


class ReasoningOutput(msgspec.Struct, kw_only=True, tag_field="type", tag="reasoning"):
    id: str
    summary: list[Any] = msgspec.field(default_factory=list)
    content: list[ReasoningTextPart] | None = None
    encrypted_content: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class FunctionCallOutput(msgspec.Struct, kw_only=True, tag_field="type", tag="function_call"):
    """A call the model made: the client runs it and sends back a function_call_output."""

    id: str
    call_id: str
    name: str
    arguments: str
    status: Literal["in_progress", "completed", "incomplete"] = "completed"


OutputItem = OutputMessage | ReasoningOutput | FunctionCallOutput


class InputTokensDetails(msgspec.Struct, kw_only=True):
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    input_tokens_per_turn: list[int] = msgspec.field(default_factory=list)
    cached_tokens_per_turn: list[int] = msgspec.field(default_factory=list)


class OutputTokensDetails(msgspec.Struct, kw_only=True):
    reasoning_tokens: int = 0
    tool_output_tokens: int = 0
    output_tokens_per_turn: list[int] = msgspec.field(default_factory=list)
    tool_output_tokens_per_turn: list[int] = msgspec.field(default_factory=list)


class ResponseUsage(msgspec.Struct, kw_only=True):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class IncompleteDetails(msgspec.Struct, kw_only=True):
    reason: Literal["max_output_tokens", "content_filter"]


class ResponsesResponse(msgspec.Struct, kw_only=True):
    id: str
    created_at: int = msgspec.field(default_factory=lambda: int(time.time()))
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    metadata: Metadata | None = None
    model: str
    object: Literal["response"] = "response"
    output: list[OutputItem] = msgspec.field(default_factory=list)
    parallel_tool_calls: bool = True
    temperature: float = 1.0
    tool_choice: ToolChoice = "auto"
    tools: list[FunctionTool] = msgspec.field(default_factory=list)
    top_p: float = 1.0
    background: bool = False
    max_output_tokens: int
    max_tool_calls: int | None = None
    previous_response_id: str | None = None
    prompt: None = None
    reasoning: Reasoning | None = None
    service_tier: Literal["auto", "default"] = "auto"
    status: Status
    text: TextConfig | None = None
    top_logprobs: int | None = None
    truncation: Literal["auto", "disabled"] = "disabled"
    usage: ResponseUsage | None = None
    user: str | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    kv_transfer_params: None = None
    ec_transfer_params: None = None
    # enable_response_messages: the prompt's and the answer's messages (gpt-oss: harmony
    # messages; other models: vLLM's raw_message_tokens, text and token ids).
    input_messages: list[dict[str, Any]] | None = None
    output_messages: list[dict[str, Any]] | None = None
