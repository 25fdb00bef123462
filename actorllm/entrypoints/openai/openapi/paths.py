"""The document's paths: one operation per route this server serves, with its request
body, its answers (JSON, and SSE for streamed generation) and every status it can answer.
A route behind the API key lists 401 and the bearer scheme only when a key is set."""

from __future__ import annotations

from typing import Any

import msgspec

from actorllm.entrypoints.anthropic.openapi import anthropic_paths
from actorllm.entrypoints.anthropic.openapi import error_body as anthropic_error_body
from actorllm.entrypoints.cohere.openapi import cohere_paths
from actorllm.entrypoints.generative_scoring.openapi import RULES as GENERATIVE_SCORING_RULES
from actorllm.entrypoints.openai import dev_rpc
from actorllm.entrypoints.openai import protocol as p
from actorllm.entrypoints.openai.middleware import is_guarded
from actorllm.entrypoints.openai.openapi.endpoints import (
    DEV_ENDPOINTS,
    ENDPOINTS,
    GENERATION_PATHS,
    GENERATION_RULES,
    LORA_ENDPOINTS,
    POOLING_ENDPOINTS,
    POOLING_RULES,
    SAGEMAKER_UNLOAD_PATH,
    SCORE_RULES,
)
from actorllm.entrypoints.openai.openapi.parts import (
    REF,
    error_responses,
    guarded_error_responses,
    json_content,
    sse_event,
)
from actorllm.entrypoints.openai.openapi.served import Served, pooling_served
from actorllm.entrypoints.openai.protocol import pooling as pp
from actorllm.entrypoints.openai.responses.openapi import responses_paths
from actorllm.entrypoints.scale_out.openapi import scale_out_paths


def document_paths(
    ref: dict[type, Any],
    components: dict[str, Any],
    *,
    dev_mode: bool,
    api_key: bool,
    served: Served,
) -> dict[str, dict[str, Any]]:
    """Every served route's operations, by path and method. ``ref`` maps each struct to
    its schema's $ref; the dev and LoRA routes add their structs' schemas to
    ``components``."""
    error = {"description": "Error", **json_content(ref[p.ErrorResponse])}
    paths: dict[str, dict[str, Any]] = {}
    pooling = bool(served.pooling_tasks)
    endpoints = [e for e in ENDPOINTS if not (pooling and e[1] in GENERATION_PATHS)]
    endpoints += [
        ("post", path, req, resp, summary, "pooling")
        for path, req, resp, summary, needs in POOLING_ENDPOINTS
        if pooling_served(needs, served)
    ]
    for method, path, req, resp, summary, tag in endpoints:
        op = _operation(path, req, resp, summary, tag, ref, error, api_key)
        paths.setdefault(path, {})[method] = op
    if pooling:  # /invocations takes the pooling requests the model serves
        paths["/invocations"] = {"post": _pooling_invocations(ref, error, api_key, served)}
    else:  # a pooling model serves none of the generation routes
        paths["/invocations"] = {"post": _invocations(ref, error, api_key)}
        for path, ops in responses_paths(ref, api_key).items():
            for method, (op, statuses) in ops.items():
                error_responses(op, error, statuses)
                paths.setdefault(path, {})[method] = op
        for path, ops in anthropic_paths(ref, api_key).items():
            for method, (op, statuses) in ops.items():
                error_responses(op, anthropic_error_body(ref), statuses)
                paths.setdefault(path, {})[method] = op
    if served.cohere_api:  # served for every model (a pooling one answers 501)
        paths.update(cohere_paths(ref, api_key))
    if served.scale_out and not pooling:
        for path, ops in scale_out_paths(ref, api_key, cohere=served.cohere_api).items():
            for method, (op, statuses) in ops.items():
                guarded_error_responses(op, error, statuses, is_guarded(path) and api_key)
                paths.setdefault(path, {})[method] = op
    if dev_mode:
        _dev_paths(paths, components, error)
    if served.runtime_lora:
        _lora_paths(paths, components, error, api_key)
    if served.tokenizer_info:
        info = {"description": "OK", **json_content({"type": "object"})}
        op = {"summary": "The tokenizer's class, settings and chat template.", "tags": ["tokens"]}
        op["responses"] = {"200": info}
        error_responses(op, error, [500, 503])
        paths["/tokenizer_info"] = {"get": op}
    return paths


# A bytes / bytes_only pooling answer (entrypoints/openai/pooling_encoding.py)
OCTETS = "application/octet-stream"
BINARY = {"schema": {"type": "string", "format": "binary"}}


def _operation(
    path: str,
    req: type | None,
    resp: type | None,
    summary: str,
    tag: str,
    ref: dict[type, Any],
    error: dict[str, Any],
    api_key: bool,
) -> dict[str, Any]:
    """One route of the tables (ENDPOINTS, POOLING_ENDPOINTS) as an operation."""
    op: dict[str, Any] = {"summary": summary, "tags": [tag], "responses": {}}
    if tag == "pooling":
        scoring = req is pp.ScoreRequest or req is pp.RerankRequest
        op["description"] = summary + (SCORE_RULES if scoring else POOLING_RULES)
    ok: dict[str, Any] = {"description": "OK"}
    if resp is not None:
        ok.update(json_content(ref[resp]))
    if path == "/metrics":
        ok["content"] = {"text/plain": {"schema": {"type": "string"}}}
    if req in (pp.EmbeddingRequest, pp.PoolingRequest):  # encoding_format bytes, bytes_only
        ok["content"][OCTETS] = BINARY
    if path == "/v1/chat/completions/batch":
        op["description"] = summary + GENERATION_RULES + " Each conversation alone."
    if path == "/generative_scoring":
        op["description"] = summary + GENERATIVE_SCORING_RULES
    if path in ("/v1/completions", "/v1/chat/completions"):
        chunk = ref[p.CompletionResponse if req is p.CompletionRequest else p.ChatCompletionChunk]
        ok["content"]["text/event-stream"] = {"schema": sse_event(chunk, ref[p.ErrorResponse])}
        op["description"] = summary + GENERATION_RULES
    op["responses"]["200"] = ok
    statuses = [500, 503]
    if req is not None:
        op["requestBody"] = {"required": True, **json_content(ref[req])}
        statuses += [400, 404, 413]
    guarded_error_responses(op, error, statuses, is_guarded(path) and api_key)
    return op


def _invocations(ref: dict[type, Any], error: dict[str, Any], api_key: bool) -> dict[str, Any]:
    """SageMaker's ``POST /invocations``: a chat completion request (it has ``messages``)
    or a completion request (it has none), answered as that route answers."""
    completion = {"allOf": [ref[p.CompletionRequest]], "properties": {"messages": False}}
    body = {"anyOf": [ref[p.ChatCompletionRequest], completion]}
    ok = {
        "description": "OK",
        **json_content({"anyOf": [ref[p.ChatCompletionResponse], ref[p.CompletionResponse]]}),
    }
    chunks = {"anyOf": [ref[p.ChatCompletionChunk], ref[p.CompletionResponse]]}
    ok["content"]["text/event-stream"] = {"schema": sse_event(chunks, ref[p.ErrorResponse])}
    summary = (
        "SageMaker's inference route: a chat completion when the body has messages, "
        "else a completion."
    )
    return _invocations_op(summary, GENERATION_RULES, "openai", body, ok, error, api_key)


def _invocations_op(
    summary: str,
    rules: str,
    tag: str,
    body: dict[str, Any],
    ok: dict[str, Any],
    error: dict[str, Any],
    api_key: bool,
) -> dict[str, Any]:
    """``POST /invocations``'s operation: one request body of several kinds."""
    op: dict[str, Any] = {
        "summary": summary,
        "description": summary + rules,
        "tags": [tag],
        "requestBody": {"required": True, **json_content(body)},
        "responses": {"200": ok},
    }
    guarded_error_responses(op, error, [400, 404, 413, 500, 503], api_key)
    return op


def _pooling_invocations(
    ref: dict[type, Any], error: dict[str, Any], api_key: bool, served: Served
) -> dict[str, Any]:
    """``POST /invocations`` for a pooling model: a rerank, a score, or the model's own
    task (embeddings or classification), by the body's fields, as vLLM routes it."""
    kinds: list[tuple[type, type]] = []
    if pooling_served("score", served):
        kinds += [(pp.RerankRequest, pp.RerankResponse), (pp.ScoreRequest, pp.ScoreResponse)]
    if served.pooling_tasks[0] == "classify":
        kinds.append((pp.ClassificationRequest, pp.ClassificationResponse))
    else:
        kinds.append((pp.EmbeddingRequest, pp.EmbeddingResponse))
    summary = (
        "SageMaker's inference route: a rerank (query and documents), a score (text_1, "
        "queries or data_1), else the model's own task (input or messages)."
    )
    body = {"anyOf": [ref[r] for r, _ in kinds]}
    ok = {"description": "OK", **json_content({"anyOf": [ref[r] for _, r in kinds]})}
    if kinds[-1][0] is pp.EmbeddingRequest:  # encoding_format bytes, bytes_only
        ok["content"][OCTETS] = BINARY
    return _invocations_op(summary, POOLING_RULES, "pooling", body, ok, error, api_key)


def _dev_paths(
    paths: dict[str, dict[str, Any]], components: dict[str, Any], error: dict[str, Any]
) -> None:
    """The dev routes (served only in dev mode, never behind the API key)."""
    rpc = (dev_rpc.CollectiveRPCRequest, dev_rpc.CollectiveRPCResponse)
    (rpc_body, rpc_result), rpc_schemas = msgspec.json.schema_components(rpc, ref_template=REF)
    components.update(rpc_schemas)
    for method, path, summary in DEV_ENDPOINTS:
        op: dict[str, Any] = {"summary": summary, "tags": ["dev"]}
        op["responses"] = {"200": {"description": "OK"}}
        if path == "/collective_rpc":
            op["requestBody"] = {"required": True, **json_content(rpc_body)}
            op["responses"]["200"].update(json_content(rpc_result))
        error_responses(op, error, [400, 409, 500, 503] if method == "post" else [500, 503])
        paths.setdefault(path, {})[method] = op


def _lora_paths(
    paths: dict[str, dict[str, Any]], components: dict[str, Any], error: Any, api_key: bool
) -> None:
    """The runtime adapter routes (served only with ACTORLLM_ALLOW_RUNTIME_LORA_UPDATING)."""
    structs = [req for _, req, _ in LORA_ENDPOINTS]
    refs, schemas = msgspec.json.schema_components(structs, ref_template=REF)
    components.update(schemas)
    for (path, _, summary), ref in zip(LORA_ENDPOINTS, refs, strict=True):
        ok = {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}}
        op: dict[str, Any] = {
            "summary": summary,
            "tags": ["lora"],
            "requestBody": {"required": True, **json_content(ref)},
            "responses": {"200": ok},
        }
        guarded_error_responses(op, error, [400, 404, 500, 503], is_guarded(path) and api_key)
        paths[path] = {"post": op}
    op = {
        "summary": "SageMaker's unload: `Adapter NAME unregistered`; 404 for one not loaded.",
        "tags": ["lora"],
        "parameters": [
            {"name": "adapter_name", "in": "path", "required": True, "schema": {"type": "string"}}
        ],
        "responses": {
            "200": {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}}
        },
    }
    guarded_error_responses(op, error, [404, 503], False)
    paths[SAGEMAKER_UNLOAD_PATH] = {"delete": op}
