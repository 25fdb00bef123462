"""What the lifespan sets up for the handlers, and how a handler finds it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, final

from starlette.requests import Request
from starlette.responses import Response

from actorllm.entrypoints.anthropic.serving import TemplateFacts
from actorllm.entrypoints.openai.app.settings import AppSettings
from actorllm.entrypoints.openai.errors import APIError
from actorllm.entrypoints.openai.responses.background import BackgroundRuns
from actorllm.entrypoints.openai.responses.store import ResponseStore
from actorllm.entrypoints.openai.sagemaker_sessions import Sessions
from actorllm.entrypoints.openai.serving_common import ServingContext


@final
class AppState:
    """What the lifespan sets up for the handlers (one per app)."""

    def __init__(self, settings: AppSettings) -> None:
        self.settings = settings
        self.ctx: ServingContext | None = None  # set once the engine is up
        self.startup_error: BaseException | None = None  # why the engine failed to start
        self.draining = False  # shutting down: /health says 503 so traffic goes elsewhere
        # Generation requests in flight (--enable-server-load-tracking), for GET /load.
        self.server_load = 0
        # /v1/responses' store (on with ACTORLLM_ENABLE_RESPONSES_API_STORE=1, as vLLM's).
        self.responses_store = ResponseStore.from_env()
        # Background responses, run in the lifespan's task group.
        self.background = BackgroundRuns(self.responses_store)
        # /v1/messages: what its conversion learns from the chat template, once.
        self.anthropic = TemplateFacts(settings.anthropic_disabled_thinking_effort)
        # SageMaker's stateful sessions on /invocations (SAGEMAKER_ENABLE_STATEFUL_SESSIONS)
        self.sagemaker_sessions = Sessions.from_env()

    @property
    def serving(self) -> ServingContext:
        if self.ctx is None:
            raise APIError(503, "The engine is not running.")
        return self.ctx


# A route's handler: the app's state and the request in, the response out.
Handler = Callable[[AppState, Request], Awaitable[Response]]


def state_of(request: Request) -> AppState:
    state: AppState = request.app.state.actorllm
    return state


def app_state(app: Any) -> AppState:
    """The AppState of an app made by :func:`build_app` (for the server runner and tests)."""
    state: AppState = app.state.actorllm
    return state
