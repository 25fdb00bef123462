"""The Responses API's routes (``responses/serving.py`` serves them)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from actorllm.entrypoints.openai.app.state import AppState
from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.openai.middleware import request_id_of
from actorllm.entrypoints.openai.responses.serving import (
    cancel_response,
    create_response,
    decode_responses_request,
    retrieve_response,
)


async def create(state: AppState, request: Request) -> Response:
    req = decode_responses_request(await request.body())
    given = request_id_of(request.scope)  # X-Request-Id, when sent, is the response's id
    if given:
        req.request_id = given
    return await create_response(
        state.serving, state.responses_store, req, request.receive, state.background
    )


def _flag(request: Request, name: str) -> bool:
    value = request.query_params.get(name, "false").strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off", ""):
        return False
    raise bad_request(f"{name} must be true or false, got {value!r}.", name)


async def retrieve(state: AppState, request: Request) -> Response:
    starting_after = request.query_params.get("starting_after")
    if starting_after is not None and not starting_after.lstrip("-").isdigit():
        raise bad_request("starting_after must be an integer.", "starting_after")
    state.serving  # noqa: B018 - 503 while the engine is not running, as every route
    stream = _flag(request, "stream")
    return retrieve_response(state.responses_store, request.path_params["response_id"], stream)


async def cancel(state: AppState, request: Request) -> Response:
    state.serving  # noqa: B018 - 503 while the engine is not running, as every route
    return await cancel_response(
        state.responses_store, request.path_params["response_id"], state.background
    )
