"""The Messages API's part of the OpenAPI document (the ``openapi`` package assembles it)."""

from __future__ import annotations

from typing import Any

from actorllm.entrypoints.anthropic.protocol import (
    AnthropicCountTokensRequest,
    AnthropicCountTokensResponse,
    AnthropicMessagesRequest,
    AnthropicMessagesResponse,
)
from actorllm.entrypoints.openai.protocol.error_body import ErrorResponse

ANTHROPIC_STRUCTS: list[type] = [
    AnthropicMessagesRequest,
    AnthropicMessagesResponse,
    AnthropicCountTokensRequest,
    AnthropicCountTokensResponse,
]
# What the conversion refuses (400, by name): stated in the schema so a body it allows
# is served.
_REFUSED_BLOCKS = ("image", "tool_reference")

_RULES = (
    " The prompt (system, messages and tools through the chat template) must leave room "
    "in the context for `max_tokens`. `tools` with `tool_choice` auto (the default when "
    "tools are given) or any need the server started with `--enable-auto-tool-choice` "
    "and a chat template that renders tools; `output_config.format` must compile. "
    'Refused (400, naming them): image blocks, `thinking` of type "enabled" (a budget of '
    "thinking tokens is not enforced) and deferred tools (`defer_loading`, "
    "`tool_reference`). Errors after the body decodes carry Anthropic's error body."
)

_ANTHROPIC_ERROR = {
    "type": "object",
    "required": ["type", "error"],
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
        },
    },
}


_CHANGES = ["tool_addition", "tool_removal"]
# Content that holds no tool_addition / tool_removal block (those are for system messages)
_NO_CHANGES = {
    "anyOf": [
        {"type": "string"},
        {"type": "null"},
        {"type": "array", "items": {"properties": {"type": {"not": {"enum": _CHANGES}}}}},
    ]
}


def anthropic_rules(components: dict[str, Any]) -> None:
    """The rules the structs' validators and the conversion enforce, as schema: no image
    or tool_reference blocks, no ``thinking`` of type enabled on ``/v1/messages``, no
    ``defer_loading``; a tool change block has its ``tool`` (a removal by reference) and
    stands in a system message only."""
    block = components["AnthropicContentBlock"]
    kinds = block["properties"]["type"]
    kinds["enum"] = [t for t in kinds["enum"] if t not in _REFUSED_BLOCKS]
    ref = "#/components/schemas/AnthropicToolReference"
    block["allOf"] = [
        {
            "if": {"properties": {"type": {"enum": _CHANGES}}, "required": ["type"]},
            "then": {"required": ["tool"], "properties": {"tool": {"type": "object"}}},
        },
        {
            "if": {"properties": {"type": {"const": "tool_removal"}}, "required": ["type"]},
            "then": {"properties": {"tool": {"$ref": ref}}},
        },
    ]
    components["AnthropicTool"]["properties"]["defer_loading"] = {"enum": [False, None]}
    components["AnthropicMessage"]["allOf"] = [
        {
            "if": {"properties": {"role": {"enum": ["user", "assistant"]}}},
            "then": {"properties": {"content": _NO_CHANGES}},
        }
    ]
    for name in ("AnthropicMessagesRequest", "AnthropicCountTokensRequest"):
        components[name].setdefault("allOf", []).append({"properties": {"system": _NO_CHANGES}})
    thinking = components["AnthropicMessagesRequest"]["properties"]["thinking"]
    for choice in thinking["anyOf"]:
        if "discriminator" in choice:  # enabled asks for a budget this engine cannot keep
            del choice["discriminator"]["mapping"]["enabled"]
            choice["anyOf"] = [s for s in choice["anyOf"] if not s["$ref"].endswith("Enabled")]


def anthropic_paths(
    ref: dict[type, Any], api_key: bool
) -> dict[str, dict[str, tuple[dict[str, Any], list[int]]]]:
    """{path: {method: (operation, its error statuses)}}; the errors' body is given with
    :func:`error_body`."""
    event_data = {
        "type": "object",
        "required": ["type"],
        "properties": {"type": {"type": "string"}},
    }
    event = {
        "type": "object",
        "required": ["event", "data"],
        "properties": {
            "event": {"type": "string"},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": event_data,
            },
        },
    }
    message = {"schema": ref[AnthropicMessagesResponse]}
    created = {
        "description": "OK",
        "content": {"application/json": message, "text/event-stream": {"schema": event}},
    }
    summary = (
        "Anthropic's Messages API: create a message (SSE of Anthropic's events, each named "
        "by `event:`, when stream=true)."
    )
    create: dict[str, Any] = {
        "summary": summary,
        "description": summary + _RULES,
        "tags": ["anthropic"],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": ref[AnthropicMessagesRequest]}},
        },
        "responses": {"200": created},
    }
    counted = {"application/json": {"schema": ref[AnthropicCountTokensResponse]}}
    count_summary = "The prompt's tokens after the chat template, tools included."
    count: dict[str, Any] = {
        "summary": count_summary,
        "description": count_summary + _RULES,
        "tags": ["anthropic"],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": ref[AnthropicCountTokensRequest]}},
        },
        "responses": {"200": {"description": "OK", "content": counted}},
    }
    paths = {
        "/v1/messages": {"post": (create, [400, 404, 413, 500, 503])},
        "/v1/messages/count_tokens": {"post": (count, [400, 404, 413, 500, 503])},
    }
    if api_key:
        for ops in paths.values():
            for op, statuses in ops.values():
                op["security"] = [{"bearer": []}]
                statuses.append(401)
                statuses.sort()
    return paths


def error_body(ref: dict[type, Any]) -> dict[str, Any]:
    """The error answers of these routes: Anthropic's body, or the OpenAI one of a body
    that does not decode (and of the server's own checks: API key, size, engine down)."""
    schema = {"anyOf": [_ANTHROPIC_ERROR, ref[ErrorResponse]]}
    return {"description": "Error", "content": {"application/json": {"schema": schema}}}
