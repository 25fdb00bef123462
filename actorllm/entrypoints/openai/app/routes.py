"""The route table: every path the server answers, its handler and its method.

``openapi/`` documents these routes; ``tests/entrypoints/test_openapi.py`` checks that
the two agree.
"""

from __future__ import annotations

from starlette.routing import Route

from actorllm.entrypoints.openai.app import anthropic_routes as anthropic
from actorllm.entrypoints.openai.app import cohere_routes as cohere
from actorllm.entrypoints.openai.app import dev_routes as dev
from actorllm.entrypoints.openai.app import openai_routes as api
from actorllm.entrypoints.openai.app import ops_routes as ops
from actorllm.entrypoints.openai.app import responses_routes as responses
from actorllm.entrypoints.openai.app import sagemaker_routes as sagemaker
from actorllm.entrypoints.openai.app import scale_out_routes as scale_out
from actorllm.entrypoints.openai.app import weight_routes as weights
from actorllm.entrypoints.openai.app.endpoint import as_endpoint
from actorllm.entrypoints.openai.app.json_body import json_only
from actorllm.entrypoints.openai.app.load_tracking import tracked_endpoint
from actorllm.entrypoints.openai.app.render_only_paths import RENDER_ONLY_PATHS
from actorllm.entrypoints.openai.app.served_routes import only_if_served
from actorllm.entrypoints.openai.app.state import AppState, Handler
from actorllm.entrypoints.openai.lora_models import runtime_updating_allowed

ROUTES: list[tuple[str, Handler, str]] = [
    ("/v1/completions", api.completions, "POST"),
    ("/v1/chat/completions", api.chat_completions, "POST"),
    ("/v1/chat/completions/batch", api.chat_completions_batch, "POST"),
    ("/v1/responses", responses.create, "POST"),
    ("/v1/responses/{response_id}", responses.retrieve, "GET"),
    ("/v1/responses/{response_id}/cancel", responses.cancel, "POST"),
    ("/v1/messages", anthropic.messages, "POST"),  # Anthropic's Messages API
    ("/v1/messages/count_tokens", anthropic.count_tokens_route, "POST"),
    ("/generative_scoring", api.generative_scoring, "POST"),  # vLLM's, generative models
    ("/v1/models", api.models, "GET"),
    ("/v1/embeddings", api.embeddings, "POST"),
    ("/v2/embed", api.cohere_embed, "POST"),  # Cohere's
    ("/pooling", api.pooling_route, "POST"),
    ("/classify", api.classify, "POST"),
    ("/score", api.score, "POST"),
    ("/v1/score", api.score, "POST"),
    ("/rerank", api.rerank, "POST"),
    ("/v1/rerank", api.rerank, "POST"),
    ("/v2/rerank", api.rerank, "POST"),
    ("/tokenize", api.tokenize_route, "POST"),
    ("/detokenize", api.detokenize_route, "POST"),
    ("/health", ops.health, "GET"),
    ("/ping", ops.health, "GET"),  # vLLM's (SageMaker's) liveness probe, GET and POST
    ("/ping", ops.health, "POST"),
    ("/invocations", api.invocations, "POST"),  # SageMaker's inference route
    ("/metrics", ops.metrics, "GET"),
    ("/version", ops.version, "GET"),
    ("/load", ops.load, "GET"),
    ("/openapi.json", ops.openapi, "GET"),
]
# Only with dev mode (otherwise 404).
DEV_ROUTES: list[tuple[str, Handler, str]] = [
    ("/sleep", dev.sleep, "POST"),
    ("/release_kv_cache_memory", dev.release_kv_cache_memory, "POST"),
    ("/wake_up", dev.wake_up, "POST"),
    ("/is_sleeping", dev.is_sleeping, "GET"),
    ("/pause", dev.pause, "POST"),
    ("/resume", dev.resume, "POST"),
    ("/is_paused", dev.is_paused, "GET"),
    ("/server_info", dev.server_info, "GET"),
    ("/reset_prefix_cache", dev.reset_prefix_cache, "POST"),
    ("/reset_mm_cache", dev.reset_mm_cache, "POST"),
    ("/reset_encoder_cache", dev.reset_encoder_cache, "POST"),
    ("/kv_connector/toggle", dev.kv_connector_toggle, "POST"),
    ("/kv_connector/enabled", dev.kv_connector_enabled, "GET"),
    ("/collective_rpc", dev.collective_rpc, "POST"),
    ("/start_profile", dev.start_profile, "POST"),
    ("/stop_profile", dev.stop_profile, "POST"),
    # Weight transfer from a trainer (RLHF; vLLM's RL routes)
    ("/init_weight_transfer_engine", weights.init_weight_transfer_engine, "POST"),
    ("/shutdown_weight_transfer_engine", weights.shutdown_weight_transfer_engine, "POST"),
    ("/start_weight_update", weights.start_weight_update, "POST"),
    ("/update_weights", weights.update_weights, "POST"),
    ("/finish_weight_update", weights.finish_weight_update, "POST"),
    ("/update_weight_version", weights.update_weight_version, "POST"),
    ("/weight_info", weights.weight_info, "GET"),
    ("/get_world_size", weights.get_world_size, "GET"),
    ("/weight_checker", weights.weight_checker, "POST"),
    ("/abort_requests", weights.abort_requests, "POST"),
    ("/start_draft_weight_update", weights.start_draft_weight_update, "POST"),
]
# Only with ACTORLLM_ALLOW_RUNTIME_LORA_UPDATING (or vLLM's VLLM_ name) true: else 404.
LORA_ROUTES: list[tuple[str, Handler, str]] = [
    ("/v1/load_lora_adapter", api.load_lora_adapter, "POST"),
    ("/v1/unload_lora_adapter", api.unload_lora_adapter, "POST"),
    # SageMaker's spelling of the two (vLLM mounts them beside them)
    ("/adapters", sagemaker.register_adapter, "POST"),
    ("/adapters/{adapter_name}", sagemaker.unregister_adapter, "DELETE"),
]
# Only with ACTORLLM_ENABLE_COHERE_API (or vLLM's VLLM_ name) true: else 404.
COHERE_ROUTES: list[tuple[str, Handler, str]] = [
    ("/cohere/v2/chat", cohere.chat, "POST"),  # Cohere's Chat v2 API
]
# With the Cohere API and --enable-scale-out both on: else 404 (vLLM's).
COHERE_RENDER_ROUTE: tuple[str, Handler, str] = (
    "/cohere/v2/chat/render",
    scale_out.cohere_render,
    "POST",
)
# vLLM's scale-out routes (render / generate / derender): only with --enable-scale-out;
# without it vLLM's 403, left out of the document.
SCALE_OUT_ROUTES: list[tuple[str, Handler, str]] = [
    ("/v1/chat/completions/render", scale_out.chat_render, "POST"),
    ("/v1/completions/render", scale_out.completion_render, "POST"),
    ("/v1/messages/render", scale_out.messages_render, "POST"),
    ("/v1/responses/render", scale_out.responses_render, "POST"),
    ("/v1/chat/completions/derender", scale_out.chat_derender, "POST"),
    ("/v1/completions/derender", scale_out.completion_derender, "POST"),
    ("/inference/v1/generate", scale_out.generate, "POST"),
    ("/inference/v1/abort_requests", scale_out.abort_requests, "POST"),
]
# --tokens-only adds vLLM's abort route at the root as well.
TOKENS_ONLY_ABORT_ROUTE: tuple[str, Handler, str] = (
    "/abort_requests",
    scale_out.abort_requests,
    "POST",
)
SCALE_OUT_PATHS = (
    "/v1/chat/completions/render",
    "/v1/messages/render",
    "/v1/completions/render",
    "/v1/responses/render",
    "/v1/chat/completions/derender",
    "/v1/completions/derender",
    "/inference/v1/generate",
    "/inference/v1/abort_requests",
)
# Only with --enable-tokenizer-info-endpoint.
TOKENIZER_INFO_ROUTE: tuple[str, Handler, str] = ("/tokenizer_info", api.tokenizer_info, "GET")


def _by_path(table: list[tuple[str, Handler, str]]) -> list[tuple[str, Handler, list[str]]]:
    """One entry per path with all its methods, so a 405 lists every method in ``Allow``
    (two starlette Routes for one path would each claim only their own)."""
    merged: dict[str, tuple[Handler, list[str]]] = {}
    for path, fn, method in table:
        handler, methods = merged.setdefault(path, (fn, []))
        assert handler is fn, f"{path}: one handler serves all its methods"
        methods.append(method)
    return [(path, fn, methods) for path, (fn, methods) in merged.items()]


def routes(state: AppState) -> list[Route]:
    """The routes this app's settings switch on."""
    if state.settings.render_only:
        return _render_only_routes(state)
    return _engine_routes(state)


def _render_only_routes(state: AppState) -> list[Route]:
    """A render-only server's routes: those of :data:`RENDER_ONLY_PATHS` the settings
    switch on (the scale-out ones always: serving them is the server's purpose)."""
    settings = state.settings
    table = [*ROUTES, *SCALE_OUT_ROUTES]
    if cohere.cohere_api_enabled():
        table.append(COHERE_RENDER_ROUTE)
    if settings.enable_tokenizer_info_endpoint:
        table.append(TOKENIZER_INFO_ROUTE)
    return [
        Route(
            path,
            tracked_endpoint(path, only_if_served(path, json_only(path, fn)), state, settings),
            methods=methods,
        )
        for path, fn, methods in _by_path([r for r in table if r[0] in RENDER_ONLY_PATHS])
    ]


def _engine_routes(state: AppState) -> list[Route]:
    settings = state.settings
    table = [
        Route(
            path,
            tracked_endpoint(path, only_if_served(path, json_only(path, fn)), state, settings),
            methods=methods,
        )
        for path, fn, methods in _by_path(ROUTES)
    ]
    if settings.dev_mode:
        table += [
            Route(path, as_endpoint(fn), methods=methods)
            for path, fn, methods in _by_path(DEV_ROUTES)
        ]
    if runtime_updating_allowed():
        table += [
            Route(path, as_endpoint(json_only(path, fn)), methods=methods)
            for path, fn, methods in _by_path(LORA_ROUTES)
        ]
    if cohere.cohere_api_enabled():
        table += [
            Route(path, tracked_endpoint(path, fn, state, settings), methods=methods)
            for path, fn, methods in _by_path(COHERE_ROUTES)
        ]
    if cohere.cohere_api_enabled() and (settings.enable_scale_out or settings.tokens_only):
        path, fn, m = COHERE_RENDER_ROUTE
        table.append(Route(path, as_endpoint(fn), methods=[m]))
    if settings.enable_tokenizer_info_endpoint:
        path, fn, m = TOKENIZER_INFO_ROUTE
        table.append(Route(path, as_endpoint(fn), methods=[m]))
    scale_out_on = settings.enable_scale_out or settings.tokens_only
    if scale_out_on:
        table += [
            Route(
                path, tracked_endpoint(path, json_only(path, fn), state, settings), methods=methods
            )
            for path, fn, methods in _by_path(SCALE_OUT_ROUTES)
        ]
    if settings.tokens_only and not settings.dev_mode:  # dev mode serves its own
        path, fn, m = TOKENS_ONLY_ABORT_ROUTE
        table.append(Route(path, as_endpoint(fn), methods=[m]))
    served = {path for path, _, _ in SCALE_OUT_ROUTES} if scale_out_on else set()
    table += [
        Route(path, as_endpoint(ops.scale_out_disabled), methods=["POST"])
        for path in SCALE_OUT_PATHS
        if path not in served
    ]
    return table
