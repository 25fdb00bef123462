"""SageMaker's LoRA adapter API, as vLLM mounts it (through AWS's
model-hosting-container-standards) beside ``/v1/load_lora_adapter``: the same loading and
unloading under SageMaker's spelling, served only where runtime LoRA updating is on.

* ``POST /adapters`` ``{"name": ..., "src": ...}`` loads adapter ``name`` from local
  directory ``src`` (``load_inplace`` as /v1/load_lora_adapter's); ``Adapter NAME
  registered``. Errors are /v1/load_lora_adapter's (404 no adapter there, 500 one that does
  not load, 400 a name already loaded); a body without a non-empty ``name`` and ``src`` is
  a 400.
* ``DELETE /adapters/{adapter_name}`` unloads it; ``Adapter NAME unregistered``, 404 for
  one not loaded.
* ``/invocations`` with ``X-Amzn-SageMaker-Adapter-Identifier`` runs on that adapter (the
  header's value becomes the body's ``model``): :func:`with_adapter_id`.

``X-Amzn-SageMaker-Adapter-Alias``, when sent, names the adapter in the success texts.
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import Message

from actorllm.entrypoints.openai.app.state import AppState
from actorllm.entrypoints.openai.errors import APIError
from actorllm.entrypoints.openai.lora_models import (
    RegisterAdapterRequest,
    load_adapter,
    unload_adapter,
)

ADAPTER_HEADER = "X-Amzn-SageMaker-Adapter-Identifier"
ALIAS_HEADER = "X-Amzn-SageMaker-Adapter-Alias"


def _alias(request: Request, name: str) -> str:
    return request.headers.get(ALIAS_HEADER) or name


async def register_adapter(state: AppState, request: Request) -> Response:
    try:
        req = msgspec.json.decode(await request.body(), type=RegisterAdapterRequest)
    except msgspec.DecodeError as exc:
        raise APIError(400, f"Invalid adapter registration: {exc}") from None
    for field in ("name", "src"):
        if not getattr(req, field):
            raise APIError(400, f"Invalid adapter registration: '{field}' is empty", field)
    await load_adapter(state.serving.engine, req.name, req.src, load_inplace=req.load_inplace)
    return PlainTextResponse(f"Adapter {_alias(request, req.name)} registered")


async def unregister_adapter(state: AppState, request: Request) -> Response:
    name = request.path_params["adapter_name"]
    await unload_adapter(state.serving.engine, name)
    return PlainTextResponse(f"Adapter {_alias(request, name)} unregistered")


def with_adapter_id(request: Request, body: Any) -> Request:
    """``request`` as its handler reads it: with SageMaker's adapter header, a JSON object
    body gets the header's adapter as its ``model``; else ``request`` as it is."""
    adapter = request.headers.get(ADAPTER_HEADER)
    if not adapter or not isinstance(body, dict):
        return request
    data = msgspec.json.encode({**body, "model": adapter})
    sent = False

    async def receive() -> Message:
        # the new body once, then the client's own messages (its disconnect)
        nonlocal sent
        if sent:
            return await request.receive()
        sent = True
        return {"type": "http.request", "body": data, "more_body": False}

    return Request(request.scope, receive)
