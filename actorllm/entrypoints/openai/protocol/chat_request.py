"""``/v1/chat/completions``'s request: messages, tools, and how messages become a prompt.

OpenAI's message rules are types: user, system and developer messages need content, tool
messages need ``tool_call_id``, assistant messages may carry ``tool_calls`` instead of
content.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from actorllm.entrypoints.openai.protocol.bounds import MaxTokens, NonEmptyStr, NumLogprobs
from actorllm.entrypoints.openai.protocol.sampling_fields import SamplingFields


class TextContentPart(msgspec.Struct, kw_only=True, tag_field="type", tag="text"):
    text: str


class PromptEmbedsContentPart(msgspec.Struct, kw_only=True, tag_field="type", tag="prompt_embeds"):
    """vLLM's ``prompt_embeds`` part (``--enable-prompt-embeds``): base64 of
    ``torch.save(tensor [N, H])``, spliced into the prompt where the part stands."""

    data: str | None = None  # required: its absence is a 400 naming prompt_embeds, as vLLM


ContentPart = TextContentPart | PromptEmbedsContentPart

# The content a message may carry: text, or a list of parts (this server serves text
# models; other part types are refused by the decoder, naming the part).
Content = str | list[ContentPart]


class FunctionCall(msgspec.Struct, kw_only=True):
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCall(msgspec.Struct, kw_only=True):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class SystemMessage(msgspec.Struct, kw_only=True, tag_field="role", tag="system"):
    content: Content
    name: str | None = None


class DeveloperMessage(msgspec.Struct, kw_only=True, tag_field="role", tag="developer"):
    content: Content
    name: str | None = None


class UserMessage(msgspec.Struct, kw_only=True, tag_field="role", tag="user"):
    content: Content
    name: str | None = None


class AssistantMessage(msgspec.Struct, kw_only=True, tag_field="role", tag="assistant"):
    content: Content | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None  # passed to the chat template
    # An earlier turn's reasoning, as this server returns it (vLLM's two names): passed to
    # the chat template as ``reasoning_content`` (Qwen3's and DeepSeek-R1's templates read
    # it; others ignore it).
    reasoning_content: str | None = None
    reasoning: str | None = None


class ToolMessage(msgspec.Struct, kw_only=True, tag_field="role", tag="tool"):
    content: Content
    tool_call_id: str


ChatMessage = SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage
Messages = Annotated[list[ChatMessage], msgspec.Meta(min_length=1)]


class FunctionDefinition(msgspec.Struct, kw_only=True, omit_defaults=True):
    name: NonEmptyStr
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(msgspec.Struct, kw_only=True):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(msgspec.Struct, kw_only=True):
    name: NonEmptyStr


class NamedToolChoice(msgspec.Struct, kw_only=True):
    type: Literal["function"] = "function"
    function: NamedFunction


# vLLM's values (chat_completion/protocol.py); "max" is DeepSeek V4's, not OpenAI's.
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


class ChatCompletionRequest(SamplingFields, kw_only=True):
    messages: Messages
    # Tool calling (docs/tool_calling.md).
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    # Reasoning models (--reasoning-parser): False leaves reasoning_content out.
    include_reasoning: bool = True
    # A chat-template variable (gpt-oss's, the Agents SDK sets it); "none" also turns the
    # template's enable_thinking off, any other value on (preprocess.effort_kwargs).
    reasoning_effort: ReasoningEffort | None = None
    # How messages become a prompt (vLLM's chat-template extensions; see TokenizeRequest).
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False  # the template already holds the special tokens
    documents: list[dict[str, str]] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    max_tokens: MaxTokens | None = None
    max_completion_tokens: MaxTokens | None = None
    logprobs: bool = False
    top_logprobs: NumLogprobs | None = None
    # vLLM: prepend the last message's content to the reply when it has the reply's role.
    echo: bool = False
    # A Jinja template replacing the model's for this request (--trust-request-chat-template).
    chat_template: NonEmptyStr | None = None
    # vLLM: the response carries the rendered chat template as ``prompt_text`` (streamed:
    # on the first chunk).
    return_prompt_text: bool | None = None
    # vLLM's disaggregated serving: prompt_token_ids (the prefill stage's ids) is the
    # prompt, used verbatim; other keys are refused (entrypoints/openai/kv_transfer.py).
    kv_transfer_params: dict[str, Any] | None = None
