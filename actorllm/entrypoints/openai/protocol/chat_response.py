"""``/v1/chat/completions``'s answers: the whole response, and the chunks of a stream
(whose ``delta`` omits what it does not carry)."""

from __future__ import annotations

from typing import Literal

import msgspec

from actorllm.entrypoints.openai.protocol.chat_request import ToolCall
from actorllm.entrypoints.openai.protocol.logprobs import ChatLogProbs, PromptLogprobsOut
from actorllm.entrypoints.openai.protocol.usage import UsageInfo


class ChatResponseMessage(msgspec.Struct, kw_only=True):
    role: str = "assistant"
    content: str | None = None
    reasoning_content: str | None = None  # with --reasoning-parser
    # The same text under vLLM's newer name (vLLM renamed reasoning_content to reasoning
    # in late 2025): clients of either version find it.
    reasoning: str | None = None
    # Left out of the JSON when there is none, as vLLM does (and OpenAI): a client that
    # tests `message.tool_calls is not None` must not take an answer for a tool call.
    tool_calls: list[ToolCall] | msgspec.UnsetType = msgspec.UNSET

    def __post_init__(self) -> None:
        if self.reasoning is None:
            self.reasoning = self.reasoning_content
        if not self.tool_calls:
            self.tool_calls = msgspec.UNSET


class ChatChoice(msgspec.Struct, kw_only=True):
    index: int
    message: ChatResponseMessage
    logprobs: ChatLogProbs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None  # return_token_ids (vLLM)
    # --enable-return-routed-experts: base64 of the np.save'd [tokens, layers, top_k] ids.
    routed_experts: str | None = None


class ChatCompletionResponse(msgspec.Struct, kw_only=True):
    id: str
    object: str = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: UsageInfo
    system_fingerprint: str | None = None
    prompt_logprobs: PromptLogprobsOut | None = None
    prompt_token_ids: list[int] | None = None  # return_token_ids (vLLM)
    prompt_text: str | None = None  # return_prompt_text (vLLM): the rendered chat template


class DeltaFunctionCall(msgspec.Struct, kw_only=True, omit_defaults=True):
    name: str | None = None
    arguments: str | None = None


class DeltaToolCall(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A streamed tool call piece: the first carries index, id, type and name; later ones
    index and argument fragments (OpenAI's shape)."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: DeltaFunctionCall | None = None


class DeltaMessage(msgspec.Struct, kw_only=True, omit_defaults=True):
    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None  # the same, vLLM's newer name (ChatResponseMessage)
    tool_calls: list[DeltaToolCall] | None = None

    def __post_init__(self) -> None:
        if self.reasoning is None:
            self.reasoning = self.reasoning_content


class ChatChunkChoice(msgspec.Struct, kw_only=True):
    index: int
    delta: DeltaMessage
    logprobs: ChatLogProbs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None  # return_token_ids (vLLM)


class ChatCompletionChunk(msgspec.Struct, kw_only=True):
    id: str
    object: str = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: UsageInfo | None = None
    system_fingerprint: str | None = None
    prompt_logprobs: PromptLogprobsOut | None = None  # on the first chunk, when asked for
    prompt_token_ids: list[int] | None = None  # return_token_ids: on the first chunk
    prompt_text: str | None = None  # return_prompt_text: on the first chunk
