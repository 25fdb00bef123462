"""Anthropic's Messages API routes (``entrypoints/anthropic`` serves them)."""

from __future__ import annotations

from typing import TypeVar

import msgspec
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from actorllm.entrypoints.anthropic.protocol import (
    AnthropicCountTokensRequest,
    AnthropicMessagesRequest,
)
from actorllm.entrypoints.anthropic.serving import anthropic_error, count_tokens, create_message
from actorllm.entrypoints.anthropic.to_chat import refuse_unserved
from actorllm.entrypoints.openai.app.state import AppState
from actorllm.entrypoints.openai.errors import to_api_error
from actorllm.entrypoints.openai.fields import decode_request
from actorllm.entrypoints.openai.middleware import request_id_of
from actorllm.entrypoints.openai.serving_common import json_response
from actorllm.entrypoints.openai.streams import ClientDisconnected

S = TypeVar("S", bound=msgspec.Struct)


async def decode_anthropic(request: Request, kind: type[S]) -> S:
    """The body as ``kind``; a body that does not decode (or sets a field of
    ``to_chat.UNSERVED``) is the OpenAI-shaped 400 of every route (vLLM's validation
    handler); what fails after that has Anthropic's body (vLLM's router)."""
    body = await request.body()
    raw = msgspec.json.decode(body)
    if isinstance(raw, dict):
        refuse_unserved(raw)
    return decode_request(body, kind)


async def messages(state: AppState, request: Request) -> Response:
    req = await decode_anthropic(request, AnthropicMessagesRequest)
    ctx = state.serving
    try:
        return await create_message(
            ctx, state.anthropic, req, request.receive, request_id_of(request.scope)
        )
    except (ClientDisconnect, ClientDisconnected):
        raise
    except Exception as exc:
        return anthropic_error(to_api_error(exc, engine_dead=ctx.is_dead()))


async def count_tokens_route(state: AppState, request: Request) -> Response:
    req = await decode_anthropic(request, AnthropicCountTokensRequest)
    ctx = state.serving
    try:
        return json_response(await count_tokens(ctx, state.anthropic, req))
    except Exception as exc:
        return anthropic_error(to_api_error(exc, engine_dead=ctx.is_dead()))
