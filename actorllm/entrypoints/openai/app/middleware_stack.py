"""The middleware around every route, in order, as the settings ask for it."""

from __future__ import annotations

from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware

from actorllm.entrypoints.openai.app.sagemaker_middleware import sagemaker_middleware
from actorllm.entrypoints.openai.app.settings import AppSettings
from actorllm.entrypoints.openai.middleware import (
    APIKeyMiddleware,
    BodyLimitMiddleware,
    RequestIdMiddleware,
    RootPathMiddleware,
    load_middleware,
)
from actorllm.entrypoints.scale_out.derender_bounds import DERENDER_BODY_FACTOR, DERENDER_PATHS


def middleware_stack(settings: AppSettings) -> list[Middleware]:
    """Outermost first: a SageMaker customer script's throttle middleware, and its
    pre/post-process innermost (``sagemaker_middleware``, the order vLLM's bootstrap gives
    them); between them the user's own (``--middleware``, outermost as in vLLM); each
    request gets its id (echoed as X-Request-Id with ``enable_request_id_headers``); CORS
    answers preflights before the API key is asked for (browsers send none there); then
    the guards (the derender routes take wider bodies: ``derender_bounds``)."""
    throttle, pre_post_process = sagemaker_middleware()
    stack = [*throttle, *load_middleware(settings.middleware)]
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
    wide = settings.max_body_bytes * DERENDER_BODY_FACTOR
    scale_out = settings.enable_scale_out or settings.render_only
    stack.append(
        Middleware(
            BodyLimitMiddleware,
            max_bytes=settings.max_body_bytes,
            route_limits=dict.fromkeys(DERENDER_PATHS, wide) if scale_out else None,
        )
    )
    return [*stack, *pre_post_process]
