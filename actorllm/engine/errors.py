"""Errors the engine raises to its callers."""

from __future__ import annotations

from actorllm.core.errors import InvalidRequestError

__all__ = [
    "EngineClosedError",
    "EngineDeadError",
    "EngineError",
    "EngineOverloadedError",
    "InvalidRequestError",
    "RequestFailedError",
    "SlowConsumerError",
]


class EngineError(RuntimeError):
    """Base class of engine failures that are not the caller's fault."""


class EngineDeadError(EngineError):
    """The engine stopped (restart intensity exceeded, or a fatal error); every open request
    fails with it and ``AsyncEngine``'s context manager raises it."""


class EngineClosedError(EngineError):
    """The engine is shutting down and accepts no new requests."""


class EngineOverloadedError(EngineError):
    """The engine refused a new request: its waiting queue is full
    (``EngineConfig.max_waiting_requests``). Nothing was queued; retry after
    ``retry_after_s`` seconds (the server answers 503 with a ``Retry-After`` header)."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class QueueOverflowError(EngineOverloadedError):
    """vLLM's: admitting the request would exceed ``max_num_queued_reqs`` open sequences
    (HTTP 503; engine/api/admission_limits.py)."""

    def __init__(self, retry_after_s: float) -> None:
        super().__init__(
            "The engine is currently busy and cannot accept new requests. "
            "Please try again later or on a different instance.",
            retry_after_s,
        )


class MaxQueuedTokensError(EngineOverloadedError):
    """vLLM's: the prompt tokens of requests still in prefill reached
    ``max_num_queued_tokens`` (HTTP 503; engine/api/admission_limits.py)."""

    def __init__(self, retry_after_s: float) -> None:
        super().__init__(
            "The engine has reached its prefill token backlog limit. "
            "Please try again later or on a different instance.",
            retry_after_s,
        )


class RequestFailedError(EngineError):
    """The engine failed this one request (e.g. it crashed an actor twice: a poison request)."""

    def __init__(self, request_id: str, reason: str) -> None:
        super().__init__(f"request {request_id} failed: {reason}")
        self.request_id = request_id
        self.reason = reason


class SlowConsumerError(EngineError):
    """The caller left ``EngineConfig.max_stream_backlog`` outputs of this request unread:
    the request was aborted (its KV blocks freed) rather than buffered without bound."""

    def __init__(self, request_id: str, backlog: int) -> None:
        super().__init__(
            f"request {request_id} was aborted: its caller left {backlog} outputs unread "
            "(max_stream_backlog)"
        )
        self.request_id = request_id
