"""Anthropic's Messages API bodies as vLLM 0.32 declares them (``anthropic/protocol.py``).

The content block is one lax struct with every block type's fields optional, as vLLM's
``AnthropicContentBlock``: a block whose field is missing is skipped by the conversion,
not refused. Fields vLLM declares for its own extensions (``cache_salt``,
``chat_template_kwargs``, ``vllm_xargs``, ``watermarking``) are here; the ones it declares
and this server cannot serve (``kv_transfer_params``, ``ec_transfer_params``) are left
out, so ``fields.UNSUPPORTED`` refuses them by name as on the chat route.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from actorllm.entrypoints.openai.protocol.bounds import MAX_I32, NonEmptyStr

# vLLM's VLLM_MAX_STOP_STRINGS default: at most this many stop_sequences.
MAX_STOP_SEQUENCES = 4

BlockType = Literal[
    "text",
    "image",
    "tool_use",
    "tool_result",
    "tool_reference",
    "thinking",
    "redacted_thinking",
    "tool_addition",
    "tool_removal",
]
Effort = Literal["low", "medium", "high", "xhigh", "max"]
# The reasoning_effort a request with thinking.type "disabled" renders with.
DisabledThinkingEffort = Literal["none", "low", "medium", "high", "xhigh", "max"]
ThinkingDisplay = Literal["summarized", "omitted", "updates"]
StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]


class AnthropicTool(msgspec.Struct, kw_only=True):
    name: str
    description: str | None = None
    input_schema: dict[str, Any]
    strict: bool | None = None
    defer_loading: bool | None = None

    def __post_init__(self) -> None:
        self.input_schema.setdefault("type", "object")  # vLLM's default


class AnthropicToolReference(msgspec.Struct, kw_only=True, tag_field="type", tag="tool_reference"):
    name: str


class AnthropicToolDefinition(
    msgspec.Struct, kw_only=True, tag_field="type", tag="tool_definition"
):
    definition: AnthropicTool


class AnthropicContentBlock(msgspec.Struct, kw_only=True):
    type: BlockType
    text: str | None = None
    source: dict[str, Any] | None = None  # image
    id: str | None = None  # tool_use
    tool_use_id: str | None = None  # tool_result
    name: str | None = None
    input: dict[str, Any] | None = None
    content: str | list[dict[str, Any]] | None = None
    is_error: bool | None = None
    tool_name: str | None = None  # tool_reference
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None  # redacted_thinking
    tool: AnthropicToolReference | AnthropicToolDefinition | None = (
        None  # tool_addition / tool_removal
    )

    def __post_init__(self) -> None:
        if self.type not in ("tool_addition", "tool_removal"):
            return
        if self.tool is None:
            raise ValueError(f"tool is required for {self.type} blocks")
        if self.type == "tool_removal" and not isinstance(self.tool, AnthropicToolReference):
            raise ValueError("tool_removal only accepts a tool_reference")


def _reject_tool_changes(content: str | list[AnthropicContentBlock] | None) -> None:
    if content is None or isinstance(content, str):
        return
    for block in content:
        if block.type in ("tool_addition", "tool_removal"):
            raise ValueError(f'{block.type} blocks are only allowed in messages with role "system"')


class AnthropicMessage(msgspec.Struct, kw_only=True):
    role: Literal["user", "assistant", "system"]
    content: str | list[AnthropicContentBlock]

    def __post_init__(self) -> None:
        if self.role != "system":
            _reject_tool_changes(self.content)


class AnthropicToolChoice(msgspec.Struct, kw_only=True):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None

    def __post_init__(self) -> None:
        if self.type == "tool" and not self.name:
            raise ValueError("tool_choice.name is required when type is 'tool'")


class AnthropicJsonOutputFormat(msgspec.Struct, kw_only=True):
    json_schema: dict[str, Any] | None = msgspec.field(default=None, name="schema")
    type: Literal["json_schema"] = "json_schema"


class AnthropicOutputConfig(msgspec.Struct, kw_only=True):
    effort: Effort | None = None
    format: AnthropicJsonOutputFormat | None = None


class AnthropicThinkingEnabled(msgspec.Struct, kw_only=True, tag_field="type", tag="enabled"):
    budget_tokens: Annotated[int, msgspec.Meta(ge=1024)]
    # Accepted as vLLM does: reasoning is always returned whole.
    display: ThinkingDisplay | None = None


class AnthropicThinkingDisabled(msgspec.Struct, kw_only=True, tag_field="type", tag="disabled"):
    pass


class AnthropicThinkingAdaptive(msgspec.Struct, kw_only=True, tag_field="type", tag="adaptive"):
    display: ThinkingDisplay | None = None


Thinking = AnthropicThinkingEnabled | AnthropicThinkingDisabled | AnthropicThinkingAdaptive
# The chat fields' bounds (sampling_fields.py): the request runs as a chat request.
StopSequences = Annotated[list[NonEmptyStr], msgspec.Meta(max_length=MAX_STOP_SEQUENCES)]


class AnthropicCountTokensRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/messages/count_tokens``."""

    model: NonEmptyStr
    messages: list[AnthropicMessage]
    output_config: AnthropicOutputConfig | None = None
    system: str | list[AnthropicContentBlock] | None = None
    thinking: Thinking | None = None
    tool_choice: AnthropicToolChoice | None = None
    tools: list[AnthropicTool] | None = None
    chat_template_kwargs: dict[str, Any] | None = None  # vLLM's

    def __post_init__(self) -> None:
        _reject_tool_changes(self.system)


class AnthropicMessagesRequest(AnthropicCountTokensRequest, kw_only=True):
    """``POST /v1/messages``."""

    max_tokens: Annotated[int, msgspec.Meta(gt=0)]
    # Anthropic's opaque tag of the caller (user_id); it asks nothing of the answer.
    metadata: dict[str, Any] | None = None
    stop_sequences: StopSequences | None = None
    stream: bool | None = False
    temperature: Annotated[float, msgspec.Meta(ge=0.0)] | None = None
    top_k: Annotated[int, msgspec.Meta(ge=-1, le=MAX_I32)] | None = None
    top_p: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] | None = None
    # vLLM's extensions
    cache_salt: Annotated[str, msgspec.Meta(min_length=1, max_length=1024)] | None = None
    vllm_xargs: dict[str, str | int | float | list[str | int | float]] | None = None
    watermarking: bool | None = None  # the server's --watermark-config: None/True on

    def __post_init__(self) -> None:
        super().__post_init__()
        thinking = self.thinking
        if (
            isinstance(thinking, AnthropicThinkingEnabled)
            and thinking.budget_tokens >= self.max_tokens
        ):
            raise ValueError("thinking.budget_tokens must be less than max_tokens")


class AnthropicUsage(msgspec.Struct, kw_only=True, omit_defaults=True):
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class AnthropicTextOut(msgspec.Struct, kw_only=True, tag_field="type", tag="text"):
    text: str


class AnthropicThinkingOut(msgspec.Struct, kw_only=True, tag_field="type", tag="thinking"):
    thinking: str
    signature: str


class AnthropicToolUseOut(msgspec.Struct, kw_only=True, tag_field="type", tag="tool_use"):
    id: str
    name: str
    input: dict[str, Any]


OutBlock = AnthropicTextOut | AnthropicThinkingOut | AnthropicToolUseOut


class AnthropicMessagesResponse(msgspec.Struct, kw_only=True):
    """The answer of a non-streamed request (vLLM's ``exclude_none`` dump: a stop reason
    or stop sequence that is None is left out)."""

    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    content: list[OutBlock]
    model: str
    stop_reason: StopReason | msgspec.UnsetType = msgspec.UNSET
    stop_sequence: str | msgspec.UnsetType = msgspec.UNSET
    usage: AnthropicUsage


class AnthropicContextManagement(msgspec.Struct, kw_only=True):
    original_input_tokens: int


class AnthropicCountTokensResponse(msgspec.Struct, kw_only=True):
    input_tokens: int
    context_management: AnthropicContextManagement
