"""vLLM's scale-out routes (``--enable-scale-out``): render, token-in/token-out generate,
abort, derender (``entrypoints/scale_out`` serves them). Without the flag they answer
vLLM's 403 and are left out of the document."""

from __future__ import annotations

import uuid
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from actorllm.entrypoints.anthropic.protocol import AnthropicMessagesRequest
from actorllm.entrypoints.cohere.serving import cohere_error
from actorllm.entrypoints.openai.app.anthropic_routes import decode_anthropic
from actorllm.entrypoints.openai.app.cohere_routes import decode_cohere
from actorllm.entrypoints.openai.app.endpoint import S, decode_body
from actorllm.entrypoints.openai.app.json_body import require_json
from actorllm.entrypoints.openai.app.state import AppState
from actorllm.entrypoints.openai.errors import bad_request, to_api_error
from actorllm.entrypoints.openai.middleware import request_id_of
from actorllm.entrypoints.openai.protocol.chat_request import ChatCompletionRequest
from actorllm.entrypoints.openai.protocol.completion import CompletionRequest
from actorllm.entrypoints.openai.responses.serving import decode_responses_request
from actorllm.entrypoints.openai.serving_common import json_response
from actorllm.entrypoints.scale_out.derender import (
    DerenderChatRequest,
    DerenderCompletionRequest,
    derender_chat,
    derender_completion,
)
from actorllm.entrypoints.scale_out.derender_stream import (
    DerenderChatStreamRequest,
    DerenderCompletionStreamRequest,
    derender_chat_stream,
    derender_completion_stream,
)
from actorllm.entrypoints.scale_out.generate import serve_generate
from actorllm.entrypoints.scale_out.protocol import GenerateRequest
from actorllm.entrypoints.scale_out.render import render_chat, render_completion
from actorllm.entrypoints.scale_out.render_converted import (
    render_cohere,
    render_messages,
    render_responses,
)


def _with_header_id(request: Request, req: S) -> S:
    """``X-Request-Id``, when sent, is the request's id (over the body's ``request_id``)."""
    given = request_id_of(request.scope)
    return msgspec.structs.replace(req, request_id=given) if given else req


async def chat_render(state: AppState, request: Request) -> Response:
    req = _with_header_id(request, await decode_body(request, ChatCompletionRequest))
    return json_response(await render_chat(state.serving, req))


async def completion_render(state: AppState, request: Request) -> Response:
    req = _with_header_id(request, await decode_body(request, CompletionRequest))
    return json_response(await render_completion(state.serving, req))


async def generate(state: AppState, request: Request) -> Response:
    # vLLM's own validation only (the OpenAI routes' cross-field rules are not its)
    req = msgspec.json.decode(await request.body(), type=GenerateRequest)
    base = request_id_of(request.scope) or req.request_id or uuid.uuid4().hex
    tokens_only = state.settings.tokens_only
    return await serve_generate(state.serving, req, base, request.receive, tokens_only)


async def abort_requests(state: AppState, request: Request) -> Response:
    """``{"request_ids": [...]}``: abort those requests (their ids as generate answered
    them, ``generate-tokens-...``); an empty 200, as vLLM."""
    try:
        body = msgspec.json.decode(await request.body())
    except msgspec.DecodeError as exc:
        raise bad_request(f"JSON decode error: {exc}") from None
    ids = body.get("request_ids") if isinstance(body, dict) else None
    if ids is None:
        raise bad_request("Missing 'request_ids' in request body", "request_ids")
    if isinstance(ids, str):
        ids = [ids]
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise bad_request("request_ids must be a list of strings.", "request_ids")
    for rid in ids:
        await state.serving.engine.abort(rid)
    return Response(status_code=200)


class _Dispatch(msgspec.Struct):
    """The one field a derender body is dispatched on; msgspec skips the others without
    building them, so the body (another server's whole answer, up to 16x a request's
    size) is built into Python objects once, by the typed decode of its route."""

    stream: Any = None


def _streamed(body: bytes) -> bool:
    """vLLM dispatches a derender body on its ``stream`` (false when left out)."""
    try:
        return msgspec.json.decode(body, type=_Dispatch).stream is True
    except msgspec.DecodeError:
        # Malformed, or not an object: decoded whole, so the 400 names the fault as a
        # plain decode does (skipping, msgspec words some faults otherwise; a typed
        # decode says "Expected `object`" before it finds malformed JSON after it).
        raw = msgspec.json.decode(body)
        return isinstance(raw, dict) and raw.get("stream") is True


async def chat_derender(state: AppState, request: Request) -> Response:
    body = await request.body()
    if _streamed(body):
        one = msgspec.json.decode(body, type=DerenderChatStreamRequest)
        return json_response(await derender_chat_stream(state.serving, one))
    req = msgspec.json.decode(body, type=DerenderChatRequest)
    return json_response(await derender_chat(state.serving, req))


async def completion_derender(state: AppState, request: Request) -> Response:
    body = await request.body()
    if _streamed(body):
        one = msgspec.json.decode(body, type=DerenderCompletionStreamRequest)
        return json_response(await derender_completion_stream(state.serving, one))
    req = msgspec.json.decode(body, type=DerenderCompletionRequest)
    return json_response(await derender_completion(state.serving, req))


async def messages_render(state: AppState, request: Request) -> Response:
    """Errors in OpenAI's body, as vLLM's render router answers (not Anthropic's)."""
    req = await decode_anthropic(request, AnthropicMessagesRequest)
    rid = request_id_of(request.scope)
    return json_response(await render_messages(state.serving, state.anthropic, req, rid))


async def responses_render(state: AppState, request: Request) -> Response:
    req = decode_responses_request(await request.body())
    given = request_id_of(request.scope)
    if given:
        req.request_id = given
    return json_response(await render_responses(state.serving, req))


async def cohere_render(state: AppState, request: Request) -> Response:
    """Every error in Cohere's body, as on /cohere/v2/chat."""
    rid = request_id_of(request.scope)
    try:
        require_json(request)
        req = decode_cohere(await request.body())
        return json_response(await render_cohere(state.serving, req, rid))
    except Exception as exc:
        dead = state.ctx is not None and state.ctx.is_dead()
        return cohere_error(to_api_error(exc, engine_dead=dead), rid)
