"""``POST /v1/responses``' request body: vLLM 0.32's ``ResponsesRequest`` fields, as msgspec
structs (types and ranges checked in one pass; a 400 names the field).

Input items are a tagged union on ``type``; a message may leave ``type`` out (OpenAI's
"easy" input message), which :func:`normalize_input` fills in before decoding. Item,
content and tool types this server does not serve (built-in tools, images, files) are
refused by name before decoding (``to_chat.refuse_unserved``), so a client reads what
is missing rather than a schema error.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from actorllm.entrypoints.openai.protocol.bounds import (
    MAX_I32,
    Bias,
    MaxTokens,
    NonEmptyStr,
    Penalty,
    Seed,
    TokenId,
    TokenIdKey,
)
from actorllm.entrypoints.openai.protocol.response_format import StructuredOutputsField

# -- input items --------------------------------------------------------------------------


class InputText(msgspec.Struct, kw_only=True, tag_field="type", tag="input_text"):
    text: str


class OutputText(msgspec.Struct, kw_only=True, tag_field="type", tag="output_text"):
    """An earlier answer's text (an assistant message sent back as input)."""

    text: str
    annotations: list[dict[str, Any]] = msgspec.field(default_factory=list)
    logprobs: list[dict[str, Any]] | None = None


class RefusalContent(msgspec.Struct, kw_only=True, tag_field="type", tag="refusal"):
    refusal: str


ContentPart = InputText | OutputText | RefusalContent
ItemStatus = Literal["in_progress", "completed", "incomplete"]


class MessageItem(msgspec.Struct, kw_only=True, tag_field="type", tag="message"):
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[ContentPart]
    id: str | None = None
    status: ItemStatus | None = None


class FunctionCallItem(msgspec.Struct, kw_only=True, tag_field="type", tag="function_call"):
    """A call the model made in an earlier turn (sent back with its output)."""

    call_id: NonEmptyStr
    name: NonEmptyStr
    arguments: str
    id: str | None = None
    status: ItemStatus | None = None


class FunctionCallOutputItem(
    msgspec.Struct, kw_only=True, tag_field="type", tag="function_call_output"
):
    """What the client's function returned for ``call_id``."""

    call_id: NonEmptyStr
    output: str | list[InputText]
    id: str | None = None
    status: ItemStatus | None = None


class ReasoningText(msgspec.Struct, kw_only=True, tag_field="type", tag="reasoning_text"):
    text: str


class SummaryText(msgspec.Struct, kw_only=True, tag_field="type", tag="summary_text"):
    text: str


class ReasoningItem(msgspec.Struct, kw_only=True, tag_field="type", tag="reasoning"):
    """An earlier turn's reasoning: its text goes back to the chat template."""

    id: str | None = None
    summary: list[SummaryText] = msgspec.field(default_factory=list)
    content: list[ReasoningText] | None = None
    encrypted_content: None = None  # refused when set, with vLLM's words (to_chat)
    status: ItemStatus | None = None


InputItem = MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem

# -- tools, formats, reasoning ------------------------------------------------------------


class FunctionTool(msgspec.Struct, kw_only=True, tag_field="type", tag="function"):
    name: NonEmptyStr
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    description: str | None = None


class FunctionToolChoice(msgspec.Struct, kw_only=True, tag_field="type", tag="function"):
    name: NonEmptyStr


ToolChoice = Literal["none", "auto", "required"] | FunctionToolChoice


class TextFormatText(msgspec.Struct, kw_only=True, tag_field="type", tag="text"):
    pass


class TextFormatJsonObject(msgspec.Struct, kw_only=True, tag_field="type", tag="json_object"):
    pass


class TextFormatJsonSchema(msgspec.Struct, kw_only=True, tag_field="type", tag="json_schema"):
    name: NonEmptyStr
    schema: dict[str, Any]
    description: str | None = None
    strict: bool | None = None


TextFormat = TextFormatText | TextFormatJsonObject | TextFormatJsonSchema


class TextConfig(msgspec.Struct, kw_only=True):
    format: TextFormat | None = None
    verbosity: None = None  # refused when set (to_chat)


ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]
SummaryKind = Literal["auto", "concise", "detailed"]


class Reasoning(msgspec.Struct, kw_only=True):
    effort: ReasoningEffort | None = None
    # Summaries are not written (as vLLM): the reasoning text is the item's content.
    summary: SummaryKind | None = None
    generate_summary: SummaryKind | None = None


# The includes served: logprobs, and encrypted reasoning, which asks nothing here (reasoning
# items carry their text in the clear; Codex sends it). OpenAI's others name outputs of
# built-in tools and image inputs, which this server lacks: refused by name (to_chat).
Include = Literal["message.output_text.logprobs", "reasoning.encrypted_content"]
MetadataValue = Annotated[str, msgspec.Meta(max_length=512)]
Metadata = Annotated[dict[str, MetadataValue], msgspec.Meta(max_length=16)]
TopLogprobs = Annotated[int, msgspec.Meta(ge=0, le=20)]

# -- the request --------------------------------------------------------------------------


class ResponsesRequest(msgspec.Struct, kw_only=True):
    """vLLM 0.32's ``ResponsesRequest``, field by field (``to_chat`` maps or refuses each)."""

    background: bool | None = False
    include: list[Include] | None = None
    input: str | Annotated[list[InputItem], msgspec.Meta(min_length=1)]
    instructions: str | None = None
    max_output_tokens: MaxTokens | None = None
    # Built-in tool calls only (OpenAI); this server has no built-in tools: echoed.
    max_tool_calls: Annotated[int, msgspec.Meta(ge=1, le=MAX_I32)] | None = None
    metadata: Metadata | None = None
    model: str | None = None
    logit_bias: dict[TokenIdKey, Bias] | None = None
    parallel_tool_calls: bool | None = True
    previous_response_id: str | None = None
    prompt: None = None  # vLLM: "prompt template is not supported" (to_chat refuses it)
    reasoning: Reasoning | None = None
    include_reasoning: bool = True
    service_tier: Literal["auto", "default"] = "auto"
    store: bool | None = True
    stream: bool | None = False
    temperature: Annotated[float, msgspec.Meta(ge=0.0)] | None = None
    text: TextConfig | None = None
    tool_choice: ToolChoice = "auto"
    tools: list[FunctionTool] = msgspec.field(default_factory=list)
    top_logprobs: TopLogprobs = 0
    top_p: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] | None = None
    top_k: Annotated[int, msgspec.Meta(ge=-1, le=MAX_I32)] | None = None
    vllm_xargs: dict[str, str | int | float | list[str | int | float]] | None = None
    watermarking: bool | None = None  # vLLM's: the server's --watermark-config, None/True on
    min_p: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] | None = None
    truncation: Literal["auto", "disabled"] | None = "disabled"
    user: str | None = None  # the end user's id, for the caller's tracking: echoed
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    # A prompt-cache routing hint (vLLM ignores it too): this server's prefix cache finds
    # shared prefixes by content, whatever the key.
    prompt_cache_key: str | None = None
    # vLLM's extensions
    request_id: Annotated[str, msgspec.Meta(min_length=1, max_length=256)] | None = None
    session_id: str | None = None  # labels KV events (none published here): asks nothing
    priority: Annotated[
        int, msgspec.Meta(ge=-MAX_I32, le=MAX_I32, extra_json_schema={"x-served": "priority"})
    ] = 0
    mm_payload: Literal["tensors", "none"] = "tensors"  # render endpoints only (as vLLM)
    return_mm_kwargs: bool | None = None
    cache_salt: Annotated[str, msgspec.Meta(min_length=1, max_length=1024)] | None = None
    # The response's input_messages / output_messages (any model, not in the background),
    # and harmony messages to continue from (gpt-oss only, as vLLM; serving.py checks).
    enable_response_messages: bool = False
    previous_input_messages: list[Any] | None = None
    structured_outputs: StructuredOutputsField | None = None
    repetition_penalty: Annotated[float, msgspec.Meta(gt=0.0, le=2.0**31)] | None = None
    seed: Seed | None = None
    stop: NonEmptyStr | list[NonEmptyStr] | None = None
    stop_token_ids: list[TokenId] | None = None
    ignore_eos: bool = False
    chat_template_kwargs: dict[str, Any] | None = None


def normalize_input(body: dict[str, Any]) -> None:
    """A message item may leave ``type`` out (``{"role": "user", "content": "hi"}``)."""
    items = body.get("input")
    if not isinstance(items, list):
        return
    body["input"] = [
        {**item, "type": "message"}
        if isinstance(item, dict) and "type" not in item and "role" in item
        else item
        for item in items
    ]
