"""Cohere's Chat v2 route (``entrypoints/cohere`` serves it), served as vLLM serves it:
only with ``ACTORLLM_ENABLE_COHERE_API=1`` (or vLLM's ``VLLM_ENABLE_COHERE_API``), and
every error in Cohere's body, a body that does not decode included (vLLM's middleware
rewrites every error on ``/cohere/*``)."""

from __future__ import annotations

import os

import msgspec
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from actorllm.entrypoints.cohere.protocol import CohereChatRequest, developer_as_system
from actorllm.entrypoints.cohere.serving import cohere_error, create_chat
from actorllm.entrypoints.openai.app.json_body import require_json
from actorllm.entrypoints.openai.app.state import AppState
from actorllm.entrypoints.openai.errors import to_api_error
from actorllm.entrypoints.openai.fields import decode_request
from actorllm.entrypoints.openai.middleware import request_id_of
from actorllm.entrypoints.openai.streams import ClientDisconnected

ENV_FLAGS = ("ACTORLLM_ENABLE_COHERE_API", "VLLM_ENABLE_COHERE_API")
_TRUE = ("1", "true", "yes", "on")


def cohere_api_enabled() -> bool:
    """Whether ``/cohere/v2/chat`` is served (an environment switch, as vLLM's: its
    answers are Cohere's, meant for Command models)."""
    return any(os.environ.get(k, "").strip().lower() in _TRUE for k in ENV_FLAGS)


def decode_cohere(body: bytes) -> CohereChatRequest:
    raw = msgspec.json.decode(body)
    if isinstance(raw, dict):
        body = msgspec.json.encode(developer_as_system(raw))
    return decode_request(body, CohereChatRequest)


async def chat(state: AppState, request: Request) -> Response:
    request_id = request_id_of(request.scope)
    try:
        require_json(request)
        req = decode_cohere(await request.body())
        ctx = state.serving
        return await create_chat(
            ctx,
            req,
            request.receive,
            reasoning_model=state.settings.cohere_is_reasoning_model,
            request_id=request_id,
        )
    except (ClientDisconnect, ClientDisconnected):
        raise
    except Exception as exc:
        dead = state.ctx is not None and state.ctx.is_dead()
        return cohere_error(to_api_error(exc, engine_dead=dead), request_id)
