"""The OpenAI wire protocol as msgspec structs: requests decoded and validated in one pass.

``decode_request`` (``fields.py``) checks every field's type and range against these
structs; what they reject becomes a 400 naming the field (``$.temperature``). The structs
carry every constraint JSON Schema can state, so the OpenAPI document generated from them
tells the truth. Rules between fields (``min_tokens <= max_tokens``) are checked by
``SamplingParams``; rules that depend on the model (prompt length, vocabulary) by the
serving layer and the engine.

Fields vLLM knows that this server cannot honour yet are not declared here: ``fields.py``
refuses them by name (400); fields nobody knows are ignored with a warning, as vLLM does.

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

# ``x-served`` marks bounds that depend on the served model: openapi.py fills them in
# (vocabulary size, context length, scheduling policy), so the document states them.
TokenId = Annotated[int, msgspec.Meta(ge=0, le=_MAX_I32, extra_json_schema={"x-served": "token"})]
MaxTokens = Annotated[
    int, msgspec.Meta(ge=1, le=_MAX_I32, extra_json_schema={"x-served": "max_tokens"})
]
NumSamples = Annotated[int, msgspec.Meta(ge=1, le=MAX_N)]
NumLogprobs = Annotated[int, msgspec.Meta(ge=0, le=MAX_LOGPROBS)]
NonEmptyStr = Annotated[str, msgspec.Meta(min_length=1)]
Penalty = Annotated[float, msgspec.Meta(ge=-2.0, le=2.0)]
Seed = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
# logit_bias keys are token ids written as JSON object keys (strings of digits).
TokenIdKey = Annotated[
    str, msgspec.Meta(pattern="^[0-9]{1,10}$", extra_json_schema={"x-served": "token_key"})
]
Bias = Annotated[float, msgspec.Meta(ge=-100.0, le=100.0)]
# A prompt: text, token ids, or a batch of either (msgspec allows one array type per union,
# so the batch forms share one list type and are sorted out by `prompt_batch`; the OpenAPI
# document states the four real forms).
PromptBatch = Annotated[list[NonEmptyStr | TokenId | list[TokenId]], msgspec.Meta(min_length=1)]
PromptInput = NonEmptyStr | PromptBatch


class StreamOptions(msgspec.Struct, kw_only=True):
    include_usage: bool = False
    continuous_usage_stats: bool = False  # usage on every chunk (vLLM)


class JsonSchemaFormat(msgspec.Struct, kw_only=True):
    name: str = "response"
    description: str | None = None
    schema: dict[str, Any]
    strict: bool | None = None


class TextFormat(msgspec.Struct, kw_only=True, tag_field="type", tag="text"):
    pass


class JsonObjectFormat(msgspec.Struct, kw_only=True, tag_field="type", tag="json_object"):
    pass


class JsonSchemaResponseFormat(msgspec.Struct, kw_only=True, tag_field="type", tag="json_schema"):
    json_schema: JsonSchemaFormat


class StructuralTagResponseFormat(
    msgspec.Struct, kw_only=True, tag_field="type", tag="structural_tag", omit_defaults=True
):
    """vLLM's structural tag: ``structures`` (begin, JSON schema, end) entered after one of
    the ``triggers``; or xgrammar's newer ``format`` object."""

    structures: list[dict[str, Any]] | None = None
    triggers: list[str] | None = None
    format: dict[str, Any] | None = None


ResponseFormat = (
    TextFormat | JsonObjectFormat | JsonSchemaResponseFormat | StructuralTagResponseFormat
)


class StructuredOutputsField(
    msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True
):
    """vLLM's ``structured_outputs`` body field: one constraint plus options (an unknown
    key is a 400 naming it, never dropped)."""

    json: dict[str, Any] | str | None = None
    json_object: bool | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    structural_tag: str | None = None
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: str | None = None
    disable_fallback: bool = False
    backend: Literal["auto", "xgrammar", "guidance"] | None = None


class SamplingFields(msgspec.Struct, kw_only=True):
    """Fields common to both request kinds (OpenAI's and vLLM's extensions)."""

    model: str | None = None
    n: NumSamples = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: NonEmptyStr | list[NonEmptyStr] | None = None
    seed: Seed | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0.0)] | None = None
    top_p: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] | None = None
    presence_penalty: Penalty = 0.0
    frequency_penalty: Penalty = 0.0
    logit_bias: dict[TokenIdKey, Bias] | None = None
    user: str | None = None  # the end user's id, for the caller's own tracking: asks nothing of us
    # vLLM extensions
    top_k: Annotated[int, msgspec.Meta(ge=-1, le=_MAX_I32)] | None = None
    min_p: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] | None = None
    repetition_penalty: Annotated[float, msgspec.Meta(gt=0.0, le=2.0**31)] | None = None
    min_tokens: Annotated[
        int, msgspec.Meta(ge=0, le=_MAX_I32, extra_json_schema={"x-served": "max_tokens"})
    ] = 0
    ignore_eos: bool = False
    stop_token_ids: list[TokenId] | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    allowed_token_ids: Annotated[list[TokenId], msgspec.Meta(min_length=1)] | None = None
    bad_words: list[NonEmptyStr] | None = None
    prompt_logprobs: NumLogprobs | None = None
    # -1: the last max_model_len - 1 tokens; k >= 1: the last k (0 is refused).
    truncate_prompt_tokens: Annotated[int, msgspec.Meta(ge=-1, le=_MAX_I32)] | None = None
    return_tokens_as_token_ids: bool = False
    return_token_ids: bool = False  # the response carries prompt and output token ids
    # Only requests with the same salt share prefix-cache blocks (tenant isolation).
    cache_salt: NonEmptyStr | None = None
    priority: Annotated[
        int, msgspec.Meta(ge=-_MAX_I32, le=_MAX_I32, extra_json_schema={"x-served": "priority"})
    ] = 0
    request_id: Annotated[str, msgspec.Meta(min_length=1, max_length=256)] | None = None
    # Structured outputs (docs/structured_outputs.md): one of these at most.
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputsField | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: Annotated[list[str], msgspec.Meta(min_length=1)] | None = None
    guided_grammar: NonEmptyStr | None = None
    guided_decoding_backend: Literal["auto", "xgrammar", "guidance"] | None = None
    guided_whitespace_pattern: str | None = None


class CompletionRequest(SamplingFields, kw_only=True):
    prompt: PromptInput
    max_tokens: MaxTokens | None = 16
    logprobs: NumLogprobs | None = None
    echo: bool = False
    add_special_tokens: bool = True


class TextContentPart(msgspec.Struct, kw_only=True):
    type: Literal["text"]
    text: str


# The content a message may carry: text, or a list of text parts (this server serves text
# models; other part types are refused by the decoder, naming the part).
Content = str | list[TextContentPart]


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


# OpenAI's message rules as types: user, system and developer messages need content, tool
# messages need tool_call_id, assistant messages may carry tool_calls instead of content.
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


class ChatCompletionRequest(SamplingFields, kw_only=True):
    messages: Messages
    # Tool calling (docs/tool_calling.md).
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    # Reasoning models (--reasoning-parser): False leaves reasoning_content out.
    include_reasoning: bool = True
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


class TokenizeRequest(msgspec.Struct, kw_only=True):
    """Exactly one of ``prompt`` / ``messages``; the template fields are chat's."""

    model: str | None = None
    prompt: str | msgspec.UnsetType = msgspec.UNSET
    messages: Messages | msgspec.UnsetType = msgspec.UNSET
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool | None = None  # None: True for a prompt, False for messages
    documents: list[dict[str, str]] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    chat_template: NonEmptyStr | None = None  # as chat's (--trust-request-chat-template)
    tools: list[Tool] | None = None  # rendered by the chat template, as chat's
    return_token_strs: bool = False  # also the tokens as strings


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


class LogprobEntry(msgspec.Struct, kw_only=True):
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


# vLLM's prompt_logprobs: per prompt position {token id: entry}; the first position is null.
PromptLogprobsOut = list[dict[str, LogprobEntry] | None]


class CompletionChoice(msgspec.Struct, kw_only=True):
    index: int
    text: str
    logprobs: CompletionLogProbs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    prompt_logprobs: PromptLogprobsOut | None = None
    # return_token_ids (vLLM): the prompt's ids (first chunk) and the sampled ones.
    prompt_token_ids: list[int] | None = None
    token_ids: list[int] | None = None


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
    reasoning_content: str | None = None  # with --reasoning-parser
    # The same text under vLLM's newer name (vLLM renamed reasoning_content to reasoning
    # in late 2025): clients of either version find it.
    reasoning: str | None = None
    tool_calls: list[ToolCall] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        if self.reasoning is None:
            self.reasoning = self.reasoning_content


class ChatChoice(msgspec.Struct, kw_only=True):
    index: int
    message: ChatResponseMessage
    logprobs: ChatLogProbs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None  # return_token_ids (vLLM)


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
    token_strs: list[str] | None = None  # with return_token_strs


class DetokenizeResponse(msgspec.Struct, kw_only=True):
    prompt: str


class VersionResponse(msgspec.Struct, kw_only=True):
    version: str


class LoadResponse(msgspec.Struct, kw_only=True):
    """``GET /load``: generation requests in flight (``--enable-server-load-tracking``)."""

    server_load: int


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
