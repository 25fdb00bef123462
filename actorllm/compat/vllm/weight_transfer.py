"""vLLM's weight-transfer request forms, unwrapped for the engine: a
``WeightTransferInitRequest`` / ``WeightTransferUpdateRequest`` (ours or vLLM's: anything
with ``init_info`` / ``update_info``) or a dict holding that key, as vLLM's ``LLM``
accepts."""

from __future__ import annotations

from typing import Any

from actorllm.core.errors import InvalidRequestError


def unwrap(request: Any, key: str) -> Any:
    """``request[key]`` for a dict, ``request.<key>`` for a request object."""
    if isinstance(request, dict):
        if key not in request:
            raise InvalidRequestError(
                f"the request dict must hold {key!r} (got keys {sorted(request)}).", param=key
            )
        return request[key]
    if hasattr(request, key):
        return getattr(request, key)
    raise InvalidRequestError(
        f"expected a dict with {key!r} or a request object with .{key}, got "
        f"{type(request).__name__}.",
        param=key,
    )
