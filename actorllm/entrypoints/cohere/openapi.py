"""The Cohere Chat v2 route's part of the OpenAPI document (the ``openapi`` package
assembles it; only where the route is served: ``ACTORLLM_ENABLE_COHERE_API``)."""

from __future__ import annotations

from typing import Any

from actorllm.entrypoints.cohere.protocol import CohereChatRequest, CohereChatResponse, CohereError

COHERE_STRUCTS: list[type] = [CohereChatRequest, CohereChatResponse, CohereError]

_RULES = (
    " The prompt (messages, documents and tools through the chat template) must leave room "
    "in the context for `max_tokens`. `tools` without `tool_choice` (auto) need the server "
    "started with `--enable-auto-tool-choice`; `response_format` must compile. Refused (400, "
    "naming them): `image_url` blocks and an assistant message's `citations`. Every error "
    "carries Cohere's body; a model that cannot chat answers 501."
)


def cohere_paths(ref: dict[type, Any], api_key: bool) -> dict[str, dict[str, Any]]:
    """{path: {method: operation}}, its error answers included."""
    event = {
        "type": "string",
        "contentMediaType": "application/json",
        "contentSchema": {
            "type": "object",
            "required": ["type"],
            "properties": {"type": {"type": "string"}},
        },
    }
    ok = {
        "description": "OK",
        "content": {
            "application/json": {"schema": ref[CohereChatResponse]},
            "text/event-stream": {"schema": {"type": "object", "properties": {"data": event}}},
        },
    }
    error = {"description": "Error", "content": {"application/json": {"schema": ref[CohereError]}}}
    summary = "Cohere's Chat v2 API (SSE of Cohere's events, ended by [DONE], when stream=true)."
    statuses = [400, 404, 413, 500, 501, 503] + ([401] if api_key else [])
    op: dict[str, Any] = {
        "summary": summary,
        "description": summary + _RULES,
        "tags": ["cohere"],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": ref[CohereChatRequest]}},
        },
        "responses": {"200": ok, **{str(s): error for s in sorted(statuses)}},
    }
    if api_key:
        op["security"] = [{"bearer": []}]
    return {"/cohere/v2/chat": {"post": op}}
