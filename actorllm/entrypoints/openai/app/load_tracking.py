"""``--enable-server-load-tracking``: the generation routes count themselves while they
run, for ``GET /load``."""

from __future__ import annotations

from typing import Any, final

from starlette.routing import request_response
from starlette.types import ASGIApp, Receive, Scope, Send

from actorllm.entrypoints.openai.app.endpoint import as_endpoint
from actorllm.entrypoints.openai.app.settings import AppSettings
from actorllm.entrypoints.openai.app.state import AppState, Handler

# The routes that run the engine: what --enable-server-load-tracking counts.
LOAD_TRACKED = frozenset(
    {
        "/v1/completions",
        "/v1/chat/completions",
        "/v1/chat/completions/batch",
        "/invocations",
        # vLLM counts its Responses routes, retrieval and cancel included.
        "/v1/responses",
        "/v1/responses/{response_id}",
        "/v1/responses/{response_id}/cancel",
        "/v1/messages",  # and its count_tokens, as vLLM's load_aware_call
        "/v1/messages/count_tokens",
        "/generative_scoring",
        "/cohere/v2/chat",
        "/inference/v1/generate",  # vLLM's scale-out generate (load_aware_call)
    }
)


@final
class LoadTracked:
    """An ASGI route app that counts itself in ``AppState.server_load`` from the request's
    arrival until its response is sent (a stream's last chunk; a disconnect), as vLLM's
    ``load_aware_call``."""

    def __init__(self, app: ASGIApp, state: AppState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.state.server_load += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.state.server_load -= 1


def tracked_endpoint(path: str, fn: Handler, state: AppState, settings: AppSettings) -> Any:
    """The route's endpoint; counted in the server load when tracking is on."""
    endpoint = as_endpoint(fn)
    if settings.enable_server_load_tracking and path in LOAD_TRACKED:
        return LoadTracked(request_response(endpoint), state)
    return endpoint
