"""Dev-mode routes (``--dev-mode``): sleep and wake (by tags), pause and resume, the server's
configuration, the prefix cache, the KV connector, RPC into the workers, the profiler.
Without dev mode they do not exist (404), as vLLM's without ``VLLM_SERVER_DEV_MODE``.
Bodies and query parameters are vLLM's (its entrypoints/serve/dev and entrypoints/rl)."""

from __future__ import annotations

from typing import Literal

import anyio
import msgspec
from starlette.requests import Request
from starlette.responses import Response

from actorllm.engine.errors import InvalidRequestError
from actorllm.engine.recovery.pause import PAUSE_MODES, PauseMode, check_mode
from actorllm.entrypoints.openai import dev_rpc
from actorllm.entrypoints.openai.app.state import AppState
from actorllm.entrypoints.openai.dev_server_info import server_info_payload
from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.openai.serving_common import json_response


def _query_bool(request: Request, name: str, default: bool | None = None) -> bool:
    raw = request.query_params.get(name)
    if raw is None and default is not None:
        return default
    if raw is None or raw.lower() not in ("true", "false", "1", "0"):
        raise bad_request(f"query parameter `{name}` must be true or false.", name)
    return raw.lower() in ("true", "1")


async def sleep(state: AppState, request: Request) -> Response:
    """``POST /sleep?level=0|1|2&mode=abort|wait|keep`` (vLLM's default mode: abort;
    level 0 stops scheduling and frees nothing)."""
    raw = request.query_params.get("level", "1")
    if raw not in ("0", "1", "2"):
        raise bad_request("query parameter `level` must be 0, 1 or 2.", "level")
    await state.serving.engine.sleep(int(raw), _pause_mode(request))
    return json_response({"status": "sleeping", "level": int(raw)})


async def release_kv_cache_memory(state: AppState, request: Request) -> Response:
    """``POST /release_kv_cache_memory``: the KV cache freed after a completed level-0
    sleep (a 400 saying what is missing otherwise); ``/wake_up?tags=kv_cache`` restores it."""
    await state.serving.engine.release_kv_cache_memory()
    return json_response({"status": "kv_cache_released"})


def _pause_mode(request: Request) -> PauseMode:
    mode = request.query_params.get("mode", "abort")
    if mode not in PAUSE_MODES:
        raise bad_request(
            f"query parameter `mode` must be one of {', '.join(PAUSE_MODES)}, got {mode!r}.",
            "mode",
        )
    return check_mode(mode)


async def wake_up(state: AppState, request: Request) -> Response:
    """``POST /wake_up?tags=weights&tags=kv_cache&tags=scheduling`` (no tags: everything)."""
    tags = request.query_params.getlist("tags") or None
    fully_awake = await state.serving.engine.wake_up(tags)
    return json_response({"status": "awake" if fully_awake else "sleeping", "tags": tags})


async def pause(state: AppState, request: Request) -> Response:
    """``POST /pause?mode=abort|wait|keep&clear_cache=true``."""
    mode = _pause_mode(request)
    clear_cache = _query_bool(request, "clear_cache", default=True)
    await state.serving.engine.pause_generation(mode=mode, clear_cache=clear_cache)
    return json_response({"status": "paused"})


async def resume(state: AppState, request: Request) -> Response:
    await state.serving.engine.resume_generation()
    return json_response({"status": "resumed"})


async def is_paused(state: AppState, request: Request) -> Response:
    return json_response({"is_paused": await state.serving.engine.is_paused()})


async def server_info(state: AppState, request: Request) -> Response:
    """``GET /server_info?config_format=text|json``: vLLM's three keys."""
    config_format = request.query_params.get("config_format", "text")
    if config_format not in ("text", "json"):
        raise bad_request(
            f"query parameter `config_format` must be text or json, got {config_format!r}.",
            "config_format",
        )
    fmt: Literal["text", "json"] = "json" if config_format == "json" else "text"
    info = await anyio.to_thread.run_sync(server_info_payload, state.serving.engine.config, fmt)
    return json_response(info)


async def is_sleeping(state: AppState, request: Request) -> Response:
    return json_response({"is_sleeping": await state.serving.engine.is_sleeping()})


async def reset_prefix_cache(state: AppState, request: Request) -> Response:
    """``POST /reset_prefix_cache?reset_running_requests=false&reset_external=false``
    (vLLM's query parameters; on, each is a 400 naming it, not dropped)."""
    try:
        done = await state.serving.engine.reset_prefix_cache(
            reset_running_requests=_query_bool(request, "reset_running_requests", default=False),
            reset_connector=_query_bool(request, "reset_external", default=False),
        )
    except InvalidRequestError as exc:
        if exc.param != "reset_connector":
            raise
        raise bad_request(str(exc), "reset_external") from None  # its name on this route
    return json_response({"success": bool(done)})  # vLLM 0.32's: false while blocks are held


async def reset_mm_cache(state: AppState, request: Request) -> Response:
    """``POST /reset_mm_cache`` (vLLM's): the models served here take no multimodal inputs,
    so there is no such cache to clear; 200, as vLLM answers."""
    return Response(status_code=200)


async def reset_encoder_cache(state: AppState, request: Request) -> Response:
    """``POST /reset_encoder_cache`` (vLLM's): as ``/reset_mm_cache``, nothing to clear."""
    return Response(status_code=200)


async def kv_connector_toggle(state: AppState, request: Request) -> Response:
    enabled = _query_bool(request, "enabled")
    await state.serving.engine.set_kv_connector_enabled(enabled)
    return json_response({"enabled": enabled})


async def kv_connector_enabled(state: AppState, request: Request) -> Response:
    return json_response({"enabled": await state.serving.engine.is_kv_connector_enabled()})


async def collective_rpc(state: AppState, request: Request) -> Response:
    # Strict: an unknown field is a 400 (forbid_unknown_fields), not a warning.
    req = msgspec.json.decode(await request.body(), type=dev_rpc.CollectiveRPCRequest)
    body = await dev_rpc.collective_rpc(state.serving.engine, req)
    return Response(body, media_type="application/json")


async def start_profile(state: AppState, request: Request) -> Response:
    await dev_rpc.profile(state.serving.engine, start=True)
    return Response(status_code=200)


async def stop_profile(state: AppState, request: Request) -> Response:
    await dev_rpc.profile(state.serving.engine, start=False)
    return Response(status_code=200)
