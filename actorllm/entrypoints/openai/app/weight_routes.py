"""Dev-mode routes of weight transfer from a trainer (RLHF), with vLLM 0.32's paths,
bodies and answers (``vllm/entrypoints/rl/online/api_router.py``):

* ``POST /init_weight_transfer_engine`` ``{"init_info": {...}}``
* ``POST /start_weight_update``, ``POST /shutdown_weight_transfer_engine``
* ``POST /update_weights`` ``{"update_info": {...}}`` (answers once the tensors are in)
* ``POST /finish_weight_update`` ``{"weight_version": "..."}`` (body optional)
* ``POST /update_weight_version`` ``{"new_version": "..."}``, ``GET /weight_info``
* ``GET /get_world_size?include_dp=true``

Errors (never a 500 for a transfer that failed; the engine serves the old weights): a
malformed body or a tensor that does not fit the model 400; a call out of order (update
before start, ...) 409; the trainer's broadcast failed (it died or stalled) 502.
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from actorllm.entrypoints.openai.app.state import AppState
from actorllm.entrypoints.openai.errors import APIError, bad_request
from actorllm.entrypoints.openai.serving_common import json_response
from actorllm.worker.weight_receiver import WeightBroadcastError, WeightTransferError


class InitBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    init_info: dict[str, Any]


class UpdateBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    update_info: dict[str, Any] | list[dict[str, Any]]


class FinishBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    weight_version: str | None = None


class VersionBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    new_version: str


async def _body(request: Request, kind: type[Any]) -> Any:
    raw = await request.body()
    return msgspec.json.decode(raw or b"{}", type=kind)  # DecodeError / ValidationError: 400


async def _run(call: Any) -> None:
    try:
        await call
    except WeightBroadcastError as exc:
        raise APIError(502, str(exc)) from exc
    except (WeightTransferError, NotImplementedError) as exc:
        raise bad_request(str(exc)) from exc
    except ValueError:
        raise  # InvalidRequestError and other bad input: 400 naming it
    except RuntimeError as exc:  # out of order: not initialized, no update started, ...
        raise APIError(409, str(exc)) from exc


async def init_weight_transfer_engine(state: AppState, request: Request) -> Response:
    body = await _body(request, InitBody)
    await _run(state.serving.engine.init_weight_transfer_engine(body.init_info))
    return json_response({"message": "Weight transfer initialized"})


async def shutdown_weight_transfer_engine(state: AppState, request: Request) -> Response:
    await _run(state.serving.engine.shutdown_weight_transfer_engine())
    return json_response({"message": "Weight transfer shut down"})


async def start_weight_update(state: AppState, request: Request) -> Response:
    await _run(state.serving.engine.start_weight_update())
    return json_response({"message": "Weight update started"})


async def update_weights(state: AppState, request: Request) -> Response:
    body = await _body(request, UpdateBody)
    await _run(state.serving.engine.update_weights(body.update_info))
    return json_response({"message": "Weights updated"})


async def finish_weight_update(state: AppState, request: Request) -> Response:
    body = await _body(request, FinishBody)
    await _run(state.serving.engine.finish_weight_update(body.weight_version))
    return json_response({"message": "Weight update finished"})


async def update_weight_version(state: AppState, request: Request) -> Response:
    body = await _body(request, VersionBody)
    await state.serving.engine.update_weight_version(body.new_version)
    return json_response({"success": True, "new_version": body.new_version})


async def weight_info(state: AppState, request: Request) -> Response:
    return json_response({"weight_version": await state.serving.engine.get_weight_version()})


async def get_world_size(state: AppState, request: Request) -> Response:
    raw = request.query_params.get("include_dp", "true").lower()
    if raw not in ("true", "false", "1", "0"):
        raise bad_request("query parameter `include_dp` must be true or false.", "include_dp")
    size = state.serving.engine.get_world_size(raw in ("true", "1"))
    return json_response({"world_size": size})
