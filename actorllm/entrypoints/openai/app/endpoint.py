"""How a handler becomes a Starlette endpoint: every exception turns into an OpenAI error
body (:func:`errors.to_api_error`), a vanished client into 499."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import msgspec
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from actorllm.entrypoints.openai.app.state import Handler, state_of
from actorllm.entrypoints.openai.errors import to_api_error
from actorllm.entrypoints.openai.fields import decode_request
from actorllm.entrypoints.openai.streams import ClientDisconnected

S = TypeVar("S", bound=msgspec.Struct)


def as_endpoint(fn: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        state = state_of(request)
        try:
            return await fn(state, request)
        except (ClientDisconnect, ClientDisconnected):
            return Response(status_code=499)  # nobody is listening; the request was aborted
        except Exception as exc:
            dead = state.ctx is not None and state.ctx.is_dead()
            return to_api_error(exc, engine_dead=dead).response()

    endpoint.__name__ = fn.__name__
    return endpoint


async def decode_body(request: Request, kind: type[S]) -> S:
    return decode_request(await request.body(), kind)
