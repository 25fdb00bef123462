"""The ASGI app put together: routes, middleware, error handlers, lifespan."""

from __future__ import annotations

from starlette.applications import Starlette

from actorllm.entrypoints.openai.app.error_handlers import EXCEPTION_HANDLERS
from actorllm.entrypoints.openai.app.lifespan import EngineFactory, engine_lifespan
from actorllm.entrypoints.openai.app.middleware_stack import middleware_stack
from actorllm.entrypoints.openai.app.routes import routes
from actorllm.entrypoints.openai.app.settings import AppSettings
from actorllm.entrypoints.openai.app.state import AppState


def build_app(engine_factory: EngineFactory, settings: AppSettings | None = None) -> Starlette:
    """The ASGI app. ``engine_factory()`` is entered in the lifespan; if it raises, startup
    fails (``app.state.actorllm.startup_error`` holds why) and the server exits."""
    settings = settings or AppSettings()
    state = AppState(settings)
    app = Starlette(
        routes=routes(state),
        middleware=middleware_stack(settings),
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=engine_lifespan(engine_factory, state),
    )
    app.state.actorllm = state
    return app
