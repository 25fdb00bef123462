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

One module per part of the protocol; this package re-exports them all, so
``from actorllm.entrypoints.openai import protocol as p; p.ChatCompletionRequest`` reads
the whole protocol from one place:

* ``bounds``: the ranges fields may take (``TokenId``, ``MaxTokens``, ``MAX_N``, ...)
* ``response_format``: structured-output requests (``response_format``, ``structured_outputs``)
* ``sampling_fields``: the fields both generation requests share (``SamplingFields``)
* ``completion``: ``/v1/completions``' request, prompt forms and response
* ``chat_request`` / ``chat_response``: ``/v1/chat/completions``' request and answers
* ``logprobs``, ``usage``: the parts both generation responses share
* ``tokenize``: ``/tokenize`` and ``/detokenize``
* ``server_info``: ``/v1/models``, ``/version``, ``/load``
* ``error_body``: the OpenAI error body
"""

from actorllm.entrypoints.openai.protocol.bounds import (
    MAX_N,
    Bias,
    MaxTokens,
    NonEmptyStr,
    NumLogprobs,
    NumSamples,
    Penalty,
    Seed,
    TokenId,
    TokenIdKey,
)
from actorllm.entrypoints.openai.protocol.chat_request import (
    AssistantMessage,
    ChatCompletionRequest,
    ChatMessage,
    Content,
    DeveloperMessage,
    FunctionCall,
    FunctionDefinition,
    Messages,
    NamedFunction,
    NamedToolChoice,
    PromptEmbedsContentPart,
    SystemMessage,
    TextContentPart,
    Tool,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from actorllm.entrypoints.openai.protocol.chat_response import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionResponse,
    ChatResponseMessage,
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
)
from actorllm.entrypoints.openai.protocol.completion import (
    CompletionChoice,
    CompletionRequest,
    CompletionResponse,
    PromptBatch,
    PromptInput,
    prompt_batch,
)
from actorllm.entrypoints.openai.protocol.error_body import (
    ErrorInfo,
    ErrorResponse,
)
from actorllm.entrypoints.openai.protocol.logprobs import (
    ChatLogProbs,
    ChatTokenLogprob,
    ChatTopLogprob,
    CompletionLogProbs,
    LogprobEntry,
    PromptLogprobsOut,
)
from actorllm.entrypoints.openai.protocol.response_format import (
    JsonObjectFormat,
    JsonSchemaFormat,
    JsonSchemaResponseFormat,
    ResponseFormat,
    StructuralTagResponseFormat,
    StructuredOutputsField,
    TextFormat,
)
from actorllm.entrypoints.openai.protocol.sampling_fields import (
    SamplingFields,
    StreamOptions,
)
from actorllm.entrypoints.openai.protocol.server_info import (
    LoadResponse,
    ModelCard,
    ModelList,
    VersionResponse,
)
from actorllm.entrypoints.openai.protocol.tokenize import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
)
from actorllm.entrypoints.openai.protocol.usage import (
    PromptTokensDetails,
    UsageInfo,
)

__all__ = [
    "MAX_N",
    "AssistantMessage",
    "Bias",
    "ChatChoice",
    "ChatChunkChoice",
    "ChatCompletionChunk",
    "ChatCompletionRequest",
    "ChatCompletionResponse",
    "ChatLogProbs",
    "ChatMessage",
    "ChatResponseMessage",
    "ChatTokenLogprob",
    "ChatTopLogprob",
    "CompletionChoice",
    "CompletionLogProbs",
    "CompletionRequest",
    "CompletionResponse",
    "Content",
    "DeltaFunctionCall",
    "DeltaMessage",
    "DeltaToolCall",
    "DetokenizeRequest",
    "DetokenizeResponse",
    "DeveloperMessage",
    "ErrorInfo",
    "ErrorResponse",
    "FunctionCall",
    "FunctionDefinition",
    "JsonObjectFormat",
    "JsonSchemaFormat",
    "JsonSchemaResponseFormat",
    "LoadResponse",
    "LogprobEntry",
    "MaxTokens",
    "Messages",
    "ModelCard",
    "ModelList",
    "NamedFunction",
    "NamedToolChoice",
    "NonEmptyStr",
    "NumLogprobs",
    "NumSamples",
    "Penalty",
    "PromptBatch",
    "PromptEmbedsContentPart",
    "PromptInput",
    "PromptLogprobsOut",
    "PromptTokensDetails",
    "ResponseFormat",
    "SamplingFields",
    "Seed",
    "StreamOptions",
    "StructuralTagResponseFormat",
    "StructuredOutputsField",
    "SystemMessage",
    "TextContentPart",
    "TextFormat",
    "TokenId",
    "TokenIdKey",
    "TokenizeRequest",
    "TokenizeResponse",
    "Tool",
    "ToolCall",
    "ToolMessage",
    "UsageInfo",
    "UserMessage",
    "VersionResponse",
    "prompt_batch",
]
