"""The scale-out routes' part of the OpenAPI document (only where they are served:
``--enable-scale-out``; the Cohere render also needs the Cohere API on)."""

from __future__ import annotations

from typing import Any

from actorllm.entrypoints.anthropic.protocol import AnthropicMessagesRequest
from actorllm.entrypoints.cohere.protocol import CohereChatRequest, CohereError
from actorllm.entrypoints.openai import protocol as p
from actorllm.entrypoints.openai.responses.request import ResponsesRequest
from actorllm.entrypoints.scale_out.derender import (
    DerenderChatRequest,
    DerenderChatResponse,
    DerenderCompletionRequest,
    DerenderCompletionResponse,
)
from actorllm.entrypoints.scale_out.protocol import (
    AbortRequests,
    GenerateRequest,
    GenerateResponse,
    GenerateStreamResponse,
    GenerateTextResponse,
)

SCALE_OUT_STRUCTS: list[type] = [GenerateRequest, GenerateResponse, GenerateTextResponse,
                                 GenerateStreamResponse, DerenderChatRequest,
                                 DerenderCompletionRequest, DerenderChatResponse,
                                 DerenderCompletionResponse, AbortRequests]  # fmt: skip

_RENDER = (
    " Rendered as the route itself would run it (template, tokenizer, sampling defaults), "
    "without running it: vLLM's GenerateRequest, its sampling_params in vLLM's serialised "
    "form. use_beam_search and prompt embeddings are refused (400)."
)
_GENERATE = (
    " Token ids in, token ids out: sampling_params in vLLM's serialised form (max_tokens "
    "left out: the room the prompt leaves). stream=true answers SSE chunks ended by [DONE]. "
    "features, content_parts, kv_transfer_params and ec_transfer_params are refused (400): "
    "text prompts only."
)
_DERENDER = (
    " A generate response (output_mode tokens) back to the route's OpenAI answer; with "
    "stream=true, one generate chunk per call with the client-carried stream_state."
)


def scale_out_paths(
    ref: dict[type, Any], api_key: bool, *, cohere: bool
) -> dict[str, dict[str, Any]]:
    """{path: {method: (operation, its error statuses)}}; ``cohere``: the Cohere API is on
    (its render route is then served too, its errors in Cohere's body)."""
    rendered = ref[GenerateRequest]
    table: list[tuple[str, Any, Any, str]] = [
        ("/v1/chat/completions/render", ref[p.ChatCompletionRequest], rendered,
         "A chat completion request rendered." + _RENDER),
        ("/v1/completions/render", ref[p.CompletionRequest],
         {"type": "array", "items": rendered},
         "A completion request rendered, one request per prompt." + _RENDER),
        ("/v1/messages/render", ref[AnthropicMessagesRequest], rendered,
         "An Anthropic Messages request rendered." + _RENDER),
        ("/v1/responses/render", ref[ResponsesRequest], rendered,
         "A Responses API request rendered (stateless: previous_response_id is refused)."
         + _RENDER),
        ("/inference/v1/generate", rendered,
         {"anyOf": [ref[GenerateResponse], ref[GenerateTextResponse]]},
         "vLLM's token-in/token-out generation." + _GENERATE),
        ("/v1/chat/completions/derender", ref[DerenderChatRequest],
         ref[DerenderChatResponse], "A generate response as a chat completion." + _DERENDER),
        ("/v1/completions/derender", ref[DerenderCompletionRequest],
         ref[DerenderCompletionResponse],
         "Generate responses (one per prompt) as a completion." + _DERENDER),
        ("/inference/v1/abort_requests", ref[AbortRequests], None,
         "Abort generate requests by the ids generate answered (an empty 200)."),
    ]  # fmt: skip
    if cohere:
        table.append(("/cohere/v2/chat/render", ref[CohereChatRequest], rendered,
                      "A Cohere Chat v2 request rendered (errors in Cohere's body)."
                      + _RENDER))  # fmt: skip
    paths: dict[str, dict[str, Any]] = {}
    for path, body, answer, description in table:
        ok: dict[str, Any] = {"description": "OK"}
        if answer is not None:
            ok["content"] = {"application/json": {"schema": answer}}
        if path == "/inference/v1/generate":
            ok["content"]["text/event-stream"] = {"schema": {"type": "string"}}
        op: dict[str, Any] = {
            "summary": description.split(".")[0] + ".",
            "description": description,
            "tags": ["scale-out"],
            "requestBody": {"required": True, "content": {"application/json": {"schema": body}}},
            "responses": {"200": ok},
        }
        statuses = [400, 404, 413, 500, 503]
        if path.startswith("/cohere"):
            error = {"description": "Error",
                     "content": {"application/json": {"schema": ref[CohereError]}}}  # fmt: skip
            op["responses"].update({str(s): error for s in [*statuses, *([401] * api_key)]})
            if api_key:
                op["security"] = [{"bearer": []}]
            paths[path] = {"post": (op, [])}
            continue
        paths[path] = {"post": (op, statuses)}
    return paths
