"""Errors the engine raises to its callers."""

from __future__ import annotations

from actorllm.core.errors import InvalidRequestError

__all__ = [
    "EngineClosedError",
    "EngineDeadError",
    "EngineError",
    "InvalidRequestError",
    "RequestFailedError",
]


class EngineError(RuntimeError):
    """Base class of engine failures that are not the caller's fault."""


class EngineDeadError(EngineError):
    """The engine stopped (restart intensity exceeded, or a fatal error); every open request
    fails with it and ``AsyncEngine``'s context manager raises it."""


class EngineClosedError(EngineError):
    """The engine is shutting down and accepts no new requests."""


class RequestFailedError(EngineError):
    """The engine failed this one request (e.g. it crashed an actor twice: a poison request)."""

    def __init__(self, request_id: str, reason: str) -> None:
        super().__init__(f"request {request_id} failed: {reason}")
        self.request_id = request_id
        self.reason = reason
