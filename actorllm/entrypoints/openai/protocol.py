"""The OpenAI wire protocol as msgspec structs: requests decoded and validated in one pass.

``msgspec.json.decode(body, type=CompletionRequest)`` checks every field's type and range;
what it rejects becomes a 400 naming the field (``$.temperature``). Ranges that depend on
each other (``min_tokens <= max_tokens``) are checked by ``SamplingParams``; ranges that
depend on the model (prompt length, vocabulary) by the engine. Unknown fields are ignored,
as OpenAI clients send extras.

Response structs encode every field (``null`` included) as OpenAI does, except the streaming
``delta`` which omits what it does not carry.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

# Bounds that keep a request from asking the engine for absurd work; finer checks live in
# SamplingParams and the engine.
MAX_N = 128
MAX_LOGPROBS = 20
_MAX_I32 = 2**31 - 1

TokenId = Annotated[int, msgspec.Meta(ge=0, le=_MAX_I32)]
PositiveInt = Annotated[int, msgspec.Meta(ge=1, le=_MAX_I32)]
NonNegInt = Annotated[int, msgspec.Meta(ge=0, le=_MAX_I32)]
NumSamples = Annotated[int, msgspec.Meta(ge=1, le=MAX_N)]
NumLogprobs = Annotated[int, msgspec.Meta(ge=0, le=MAX_LOGPROBS)]
# A prompt: text, token ids, or a batch of either (msgspec allows one array type per union,
# so the batch forms share one list type and are sorted out by `prompt_batch`).
PromptInput = str | list[str | TokenId | list[TokenId]]


class StreamOptions(msgspec.Struct, kw_only=True):
    include_usage: bool = False


class SamplingFields(msgspec.Struct, kw_only=True):
    """Fields common to both request kinds (OpenAI's and vLLM's extensions)."""

    model: str | None = None
    n: NumSamples = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    # vLLM extensions
    top_k: Annotated[int, msgspec.Meta(ge=-1, le=_MAX_I32)] | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    min_tokens: NonNegInt = 0
    ignore_eos: bool = False
    stop_token_ids: list[TokenId] | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    priority: Annotated[int, msgspec.Meta(ge=-_MAX_I32, le=_MAX_I32)] = 0
    request_id: Annotated[str, msgspec.Meta(min_length=1, max_length=256)] | None = None


class CompletionRequest(SamplingFields, kw_only=True):
    prompt: PromptInput
    max_tokens: PositiveInt | None = 16
    logprobs: NumLogprobs | None = None
    echo: bool = False
    suffix: str | None = None


class TextContentPart(msgspec.Struct, kw_only=True):
    type: str
    text: str | None = None


class ChatMessage(msgspec.Struct, kw_only=True):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextContentPart] | None = None
    name: str | None = None


class ChatCompletionRequest(SamplingFields, kw_only=True):
    messages: Annotated[list[ChatMessage], msgspec.Meta(min_length=1)]
    max_tokens: PositiveInt | None = None
    max_completion_tokens: PositiveInt | None = None
    logprobs: bool = False
    top_logprobs: NumLogprobs | None = None
    # vLLM extensions for chat templates
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None


class TokenizeRequest(msgspec.Struct, kw_only=True):
    model: str | None = None
    prompt: str | None = None
    messages: Annotated[list[ChatMessage], msgspec.Meta(min_length=1)] | None = None
    add_special_tokens: bool = True
    add_generation_prompt: bool = True


class DetokenizeRequest(msgspec.Struct, kw_only=True):
    model: str | None = None
    tokens: list[TokenId]


# -- responses ------------------------------------------------------------------------------


class PromptTokensDetails(msgspec.Struct, kw_only=True):
    cached_tokens: int = 0


class UsageInfo(msgspec.Struct, kw_only=True):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None


class CompletionLogProbs(msgspec.Struct, kw_only=True):
    text_offset: list[int] = msgspec.field(default_factory=list)
    token_logprobs: list[float | None] = msgspec.field(default_factory=list)
    tokens: list[str] = msgspec.field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = msgspec.field(default_factory=list)


class CompletionChoice(msgspec.Struct, kw_only=True):
    index: int
    text: str
    logprobs: CompletionLogProbs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class CompletionResponse(msgspec.Struct, kw_only=True):
    id: str
    object: str = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: UsageInfo | None = None
    system_fingerprint: str | None = None


class ChatTopLogprob(msgspec.Struct, kw_only=True):
    token: str
    logprob: float
    bytes: list[int] | None = None


class ChatTokenLogprob(ChatTopLogprob, kw_only=True):
    top_logprobs: list[ChatTopLogprob] = msgspec.field(default_factory=list)


class ChatLogProbs(msgspec.Struct, kw_only=True):
    content: list[ChatTokenLogprob] | None = None


class ChatResponseMessage(msgspec.Struct, kw_only=True):
    role: str = "assistant"
    content: str | None = None


class ChatChoice(msgspec.Struct, kw_only=True):
    index: int
    message: ChatResponseMessage
    logprobs: ChatLogProbs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class ChatCompletionResponse(msgspec.Struct, kw_only=True):
    id: str
    object: str = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: UsageInfo
    system_fingerprint: str | None = None


class DeltaMessage(msgspec.Struct, kw_only=True, omit_defaults=True):
    role: str | None = None
    content: str | None = None


class ChatChunkChoice(msgspec.Struct, kw_only=True):
    index: int
    delta: DeltaMessage
    logprobs: ChatLogProbs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class ChatCompletionChunk(msgspec.Struct, kw_only=True):
    id: str
    object: str = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: UsageInfo | None = None
    system_fingerprint: str | None = None


class ModelCard(msgspec.Struct, kw_only=True):
    id: str
    object: str = "model"
    created: int
    owned_by: str = "actorllm"
    root: str | None = None
    max_model_len: int | None = None


class ModelList(msgspec.Struct, kw_only=True):
    object: str = "list"
    data: list[ModelCard]


class TokenizeResponse(msgspec.Struct, kw_only=True):
    count: int
    max_model_len: int
    tokens: list[int]


class DetokenizeResponse(msgspec.Struct, kw_only=True):
    prompt: str


class VersionResponse(msgspec.Struct, kw_only=True):
    version: str


class ErrorInfo(msgspec.Struct, kw_only=True):
    message: str
    type: str
    param: str | None = None
    code: int


class ErrorResponse(msgspec.Struct, kw_only=True):
    error: ErrorInfo


def prompt_batch(prompt: PromptInput) -> list[str | list[int]]:
    """Split a completion ``prompt`` into its prompts: text or token ids, one per entry.

    Raises ``ValueError`` on a mixed or empty batch (the caller maps it to a 400).

        >>> prompt_batch([1, 2, 3])
        [[1, 2, 3]]
        >>> prompt_batch(["a", "b"])
        ['a', 'b']
    """
    if isinstance(prompt, str):
        return [prompt]
    if not prompt:
        raise ValueError("prompt must not be empty.")
    if all(isinstance(p, int) for p in prompt):
        return [[p for p in prompt if isinstance(p, int)]]
    if all(isinstance(p, str) for p in prompt):
        return [p for p in prompt if isinstance(p, str)]
    if all(isinstance(p, list) for p in prompt):
        batch = [p for p in prompt if isinstance(p, list)]
        if any(not p for p in batch):
            raise ValueError("prompt must not contain empty token lists.")
        return list(batch)
    raise ValueError(
        "prompt must be a string, a list of strings, a list of token ids or a list of such lists."
    )
