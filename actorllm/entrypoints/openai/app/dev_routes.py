"""Dev-mode routes (``--dev-mode``): sleep and wake, the prefix cache, the KV connector,
RPC into the workers, the profiler. Without dev mode they do not exist (404)."""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from actorllm.entrypoints.openai import dev_rpc
from actorllm.entrypoints.openai.app.state import AppState
from actorllm.entrypoints.openai.errors import APIError, bad_request
from actorllm.entrypoints.openai.serving_common import json_response


def _query_bool(request: Request, name: str) -> bool:
    raw = request.query_params.get(name)
    if raw is None or raw.lower() not in ("true", "false", "1", "0"):
        raise bad_request(f"query parameter `{name}` must be true or false.", name)
    return raw.lower() in ("true", "1")


async def sleep(state: AppState, request: Request) -> Response:
    raw = request.query_params.get("level", "1")
    if raw not in ("1", "2"):
        raise bad_request("query parameter `level` must be 1 or 2.", "level")
    await state.serving.engine.sleep(int(raw))
    return Response(status_code=200)


async def wake_up(state: AppState, request: Request) -> Response:
    await state.serving.engine.wake_up()
    return Response(status_code=200)


async def is_sleeping(state: AppState, request: Request) -> Response:
    return json_response({"is_sleeping": await state.serving.engine.is_sleeping()})


async def reset_prefix_cache(state: AppState, request: Request) -> Response:
    if not await state.serving.engine.reset_prefix_cache():
        raise APIError(409, "The prefix cache could not be reset (blocks are in use).")
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
