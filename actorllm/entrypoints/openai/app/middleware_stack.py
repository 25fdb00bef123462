"""The middleware around every route, in order, as the settings ask for it."""

from __future__ import annotations

from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware

from actorllm.entrypoints.openai.app.settings import AppSettings
from actorllm.entrypoints.openai.middleware import (
    APIKeyMiddleware,
    BodyLimitMiddleware,
    RequestIdMiddleware,
    RootPathMiddleware,
    load_middleware,
)


def middleware_stack(settings: AppSettings) -> list[Middleware]:
    """Outermost first: the user's own (``--middleware``, outermost as in vLLM); each
    request gets its id (echoed as X-Request-Id with ``enable_request_id_headers``); CORS
    answers preflights before the API key is asked for (browsers send none there); then
    the guards."""
    stack = load_middleware(settings.middleware)
    stack.append(
        Middleware(
            RequestIdMiddleware,
            echo=settings.enable_request_id_headers,
            log_requests=settings.enable_log_requests,
            max_log_len=settings.max_log_len,
        )
    )
    if settings.root_path:
        stack.append(Middleware(RootPathMiddleware, root_path=settings.root_path))
    if settings.allowed_origins:
        stack.append(
            Middleware(
                CORSMiddleware,
                allow_origins=settings.allowed_origins,
                allow_methods=settings.allowed_methods,
                allow_headers=settings.allowed_headers,
                allow_credentials=settings.allow_credentials,
                expose_headers=["X-Request-Id"],
            )
        )
    if settings.api_key:
        stack.append(Middleware(APIKeyMiddleware, api_key=settings.api_key))
    stack.append(Middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes))
    return stack
