"""The OpenAPI 3.1 document served at /openapi.json, with schemas generated from the msgspec
protocol structs (``msgspec.json.schema_components``), so it cannot drift from the code."""

from __future__ import annotations

from typing import Any

import msgspec

import actorllm
from actorllm.entrypoints.openai import protocol as p

_REF = "#/components/schemas/{name}"

# (method, path, request struct or None, response struct or None, summary, tag)
_ENDPOINTS: list[tuple[str, str, type | None, type | None, str, str]] = [
    (
        "post",
        "/v1/completions",
        p.CompletionRequest,
        p.CompletionResponse,
        "Create a completion (SSE when stream=true).",
        "openai",
    ),
    (
        "post",
        "/v1/chat/completions",
        p.ChatCompletionRequest,
        p.ChatCompletionResponse,
        "Create a chat completion (SSE when stream=true).",
        "openai",
    ),
    ("get", "/v1/models", None, p.ModelList, "List the served model.", "openai"),
    (
        "post",
        "/tokenize",
        p.TokenizeRequest,
        p.TokenizeResponse,
        "Tokenize a prompt or chat messages.",
        "tokenizer",
    ),
    (
        "post",
        "/detokenize",
        p.DetokenizeRequest,
        p.DetokenizeResponse,
        "Decode token ids.",
        "tokenizer",
    ),
    ("get", "/health", None, None, "200 while the engine is alive, 503 once it is dead.", "ops"),
    ("get", "/metrics", None, None, "Prometheus metrics (text exposition format).", "ops"),
    ("get", "/version", None, p.VersionResponse, "Server version.", "ops"),
]
_DEV_ENDPOINTS: list[tuple[str, str, str]] = [
    ("post", "/sleep", "Put the engine to sleep (query: level)."),
    ("post", "/wake_up", "Wake the engine up."),
    ("get", "/is_sleeping", "Whether the engine sleeps."),
    ("post", "/reset_prefix_cache", "Drop every cached prefix block."),
    ("post", "/kv_connector/toggle", "Switch the KV connector (query: enabled=true|false)."),
    ("get", "/kv_connector/enabled", "Whether the KV connector is switched on."),
]


def _json(ref: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": ref}}}


def openapi_document(*, dev_mode: bool) -> dict[str, Any]:
    structs = [t for _, _, req, resp, _, _ in _ENDPOINTS for t in (req, resp) if t is not None]
    refs, components = msgspec.json.schema_components(
        [*structs, p.ChatCompletionChunk, p.ErrorResponse], ref_template=_REF
    )
    ref = dict(zip([*structs, p.ChatCompletionChunk, p.ErrorResponse], refs, strict=True))
    error = {"description": "Error", **_json(ref[p.ErrorResponse])}
    paths: dict[str, dict[str, Any]] = {}
    for method, path, req, resp, summary, tag in _ENDPOINTS:
        op: dict[str, Any] = {"summary": summary, "tags": [tag], "responses": {}}
        if req is not None:
            op["requestBody"] = {"required": True, **_json(ref[req])}
            op["responses"]["400"] = error
        ok: dict[str, Any] = {"description": "OK"}
        if resp is not None:
            ok.update(_json(ref[resp]))
        if path in ("/v1/completions", "/v1/chat/completions"):
            ok["content"]["text/event-stream"] = {"schema": {"type": "string"}}
        op["responses"]["200"] = ok
        if path.startswith("/v1"):
            op["responses"]["401"] = error
            op["security"] = [{"bearer": []}]
        paths.setdefault(path, {})[method] = op
    if dev_mode:
        for method, path, summary in _DEV_ENDPOINTS:
            op = {"summary": summary, "tags": ["dev"], "responses": {"200": {"description": "OK"}}}
            paths.setdefault(path, {})[method] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "actorllm OpenAI-compatible API", "version": actorllm.__version__},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
