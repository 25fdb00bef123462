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


RETRIEVE_QUERY = ("stream", "starting_after")


async def retrieve(state: AppState, request: Request) -> Response:
    for key in request.query_params:
        name = key.removesuffix("[]")  # an array, as the openai client sends include
        if name not in RETRIEVE_QUERY:  # OpenAI's include, include_obfuscation, ...
            raise bad_request(
                f"{name} is not supported on GET /v1/responses/{{response_id}} by this server "
                f"(it reads {' and '.join(RETRIEVE_QUERY)}).",
                name,
            )
    after = request.query_params.get("starting_after")
    if after is not None and not after.strip().lstrip("-").isdigit():
        raise bad_request("starting_after must be an integer.", "starting_after")
    serving = state.serving  # 503 while the engine is not running, as every route
    return retrieve_response(
        serving,
        state.responses_store,
        state.background,
        request.path_params["response_id"],
        stream=_flag(request, "stream"),
        starting_after=None if after is None else int(after),
    )


async def cancel(state: AppState, request: Request) -> Response:
    state.serving  # noqa: B018 - 503 while the engine is not running, as every route
    return await cancel_response(
        state.responses_store, request.path_params["response_id"], state.background
    )
