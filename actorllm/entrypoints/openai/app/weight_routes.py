"""Dev-mode routes of weight transfer from a trainer (RLHF), with vLLM 0.32's paths,
bodies and answers (``vllm/entrypoints/rl/online/api_router.py``):

* ``POST /init_weight_transfer_engine`` ``{"init_info": {...}}``
* ``POST /start_weight_update``, ``POST /shutdown_weight_transfer_engine``
* ``POST /update_weights`` ``{"update_info": {...}}`` (answers once the tensors are in)
* ``POST /finish_weight_update`` ``{"weight_version": "..."}`` (body optional)
* ``POST /update_weight_version`` ``{"new_version": "..."}``, ``GET /weight_info``
* ``GET /get_world_size?include_dp=true``
* ``POST /weight_checker`` ``{"action": "checksum" | "reset" | "compare", "baseline"}``
* ``POST /abort_requests`` ``{"request_ids": [...]}`` (none: every open request)
* ``POST /start_draft_weight_update``: refused by name (no draft-model updates here)

Errors (never a 500 for a transfer that failed; the engine serves the old weights): a
malformed body or a tensor that does not fit the model 400; a call out of order (update
before start, ...) 409; the trainer's broadcast failed (it died or stalled) 502.
"""

from __future__ import annotations

from typing import Any, Literal

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


class CheckerBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    action: Literal["checksum", "reset", "compare"]
    baseline: dict[str, str] | None = None


async def weight_checker(state: AppState, request: Request) -> Response:
    """``POST /weight_checker`` ``{"action": "checksum" | "reset" | "compare",
    "baseline": {...}}`` (vLLM's): every rank's weight digests as one map, zeroed
    weights, or the keys whose digest differs from ``baseline``."""
    body = await _body(request, CheckerBody)
    engine = state.serving.engine
    if body.action == "reset":
        await engine.collective_rpc("reset_weights")
        return json_response({"status": "reset"})
    if body.action == "compare" and body.baseline is None:
        raise bad_request("action='compare' requires a 'baseline' object", "baseline")
    checksums: dict[str, str] = {}
    for rank in await engine.compute_weight_checksums():
        checksums.update(rank)  # (keys are unique: each carries its replica and rank)
    if body.action == "checksum":
        return json_response({"checksums": checksums})
    assert body.baseline is not None
    keys = checksums.keys() | body.baseline.keys()
    mismatches = sorted(k for k in keys if checksums.get(k) != body.baseline.get(k))
    return json_response({"match": not mismatches, "mismatches": mismatches})


class AbortBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    request_ids: list[str] | None = None


async def abort_requests(state: AppState, request: Request) -> Response:
    """``POST /abort_requests`` ``{"request_ids": [...]}`` (vLLM's): abort those requests,
    or every open one when the list is empty or missing; nothing is paused."""
    body = await _body(request, AbortBody)
    engine = state.serving.engine
    if body.request_ids:
        for rid in body.request_ids:
            await engine.abort(rid)
        aborted = len(body.request_ids)
    else:
        aborted = await engine.abort_all()
    return json_response({"status": "aborted", "aborted": aborted})


async def start_draft_weight_update(state: AppState, request: Request) -> Response:
    """vLLM's route for a speculative draft model's weights: refused by name (400)."""
    raise bad_request(
        "start_draft_weight_update: weight updates of a speculative draft model are not "
        "built; the target model's weights update with /start_weight_update."
    )
