"""The operations routes: health, metrics, load, version, and the OpenAPI document."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import Response

from actorllm import __version__
from actorllm.engine.metrics.prometheus import CONTENT_TYPE
from actorllm.entrypoints.openai.app.cohere_routes import cohere_api_enabled
from actorllm.entrypoints.openai.app.render_only_paths import RENDER_ONLY_PATHS
from actorllm.entrypoints.openai.app.state import AppState
from actorllm.entrypoints.openai.errors import APIError
from actorllm.entrypoints.openai.lora_models import runtime_updating_allowed
from actorllm.entrypoints.openai.openapi import Served, openapi_document
from actorllm.entrypoints.openai.protocol.server_info import LoadResponse, VersionResponse
from actorllm.entrypoints.openai.serving_common import json_response

logger = logging.getLogger("actorllm.server")


async def health(state: AppState, request: Request) -> Response:
    if state.ctx is None or state.ctx.is_dead():
        raise APIError(503, "The engine is dead.")
    if state.draining:
        raise APIError(503, "The server is shutting down.")
    return Response(status_code=200)


async def metrics(state: AppState, request: Request) -> Response:
    ctx = state.serving
    if not ctx.is_dead() and not state.settings.render_only:  # render-only: no engine stats
        try:
            ctx.metrics.update_from_stats(await ctx.engine.get_stats())
        except Exception as exc:  # still serve what we have: a scrape must not fail
            logger.warning("could not read engine stats for /metrics: %s", exc)
    return Response(ctx.metrics.render(), media_type=CONTENT_TYPE)


async def load(state: AppState, request: Request) -> Response:
    """vLLM's ``GET /load``: generation requests in flight (0 unless the server runs with
    --enable-server-load-tracking)."""
    return json_response(LoadResponse(server_load=state.server_load))


async def version(state: AppState, request: Request) -> Response:
    return json_response(VersionResponse(version=__version__))


async def openapi(state: AppState, request: Request) -> Response:
    engine = state.serving.engine
    served = Served(
        engine.max_model_len,
        engine.vocab_size,
        engine.config.scheduling_policy,
        max_logprobs=engine.config.max_logprobs,
        trust_request_chat_template=state.settings.trust_request_chat_template,
        tokenizer_info=state.settings.enable_tokenizer_info_endpoint,
        pooling_tasks=pm.ordered_tasks if (pm := engine.pooling_model) is not None else (),
        cross_encoder=pm is not None and pm.is_cross_encoder,
        has_chat_template=bool(getattr(engine.tokenizer, "chat_template", None)),
        matryoshka=pm is not None and pm.spec.is_matryoshka,
        embedding_size=pm.embedding_size if pm is not None else 0,
        step_columns=pm.num_labels if pm is not None and pm.spec.tok_pooling_type == "STEP" else 0,
        input_types=tuple(sorted(pm.task_instructions)) if pm is not None else (),
        runtime_lora=runtime_updating_allowed(),
        cohere_api=cohere_api_enabled(),
        scale_out=state.settings.enable_scale_out or state.settings.render_only,
        prompt_embeds=engine.prompt_embeds_spec is not None,
        responses_store=state.responses_store.enabled,
        harmony=state.serving.chat.harmony,
    )
    settings = state.settings
    doc = openapi_document(
        dev_mode=settings.dev_mode, api_key=bool(settings.api_key), served=served
    )
    if settings.render_only:
        doc["paths"] = {p: ops for p, ops in doc["paths"].items() if p in RENDER_ONLY_PATHS}
    return json_response(doc)


async def scale_out_disabled(state: AppState, request: Request) -> Response:
    """vLLM's answer on its scale-out routes without --enable-scale-out (its status, type
    and first sentence)."""
    raise APIError(
        403,
        "Scale-out endpoints are disabled. Restart the server with --enable-scale-out to "
        "enable them.",
        kind="PermissionDeniedError",
    )
