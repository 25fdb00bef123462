"""Pure-ASGI guards in front of the routes: API key and request-body size.

Both answer with OpenAI's error body themselves, before any handler runs, so a rejected
request costs no parsing and never reaches the engine.
"""

from __future__ import annotations

import hmac
from typing import Any

from actorllm.entrypoints.openai.errors import APIError

Scope = dict[str, Any]


class APIKeyMiddleware:
    """401 unless ``Authorization: Bearer <key>`` matches, on ``/v1/*`` only (as vLLM does:
    /health, /metrics, /version and the dev endpoints stay open for probes and scrapers).

    The comparison is constant-time (``hmac.compare_digest``).
    """

    def __init__(self, app: Any, api_key: str) -> None:
        self.app = app
        self._expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if (
            scope["type"] == "http"
            and scope["path"].startswith("/v1")
            and scope["method"] != "OPTIONS"
        ):
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                response = APIError(401, "Invalid or missing API key.").response()
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class BodyLimitMiddleware:
    """413 for a body over ``max_bytes``: on ``Content-Length`` before reading anything, and
    while the body streams in (chunked uploads), by raising ``APIError(413)`` from
    ``receive`` — the handler turns it into the response."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self) -> APIError:
        return APIError(413, f"The request body exceeds the limit of {self.max_bytes} bytes.")

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            error = self._too_large() if length.isdigit() else APIError(400, "Bad Content-Length.")
            await error.response()(scope, receive, send)
            return
        received = 0

        async def limited_receive() -> Any:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise self._too_large()
            return message

        await self.app(scope, limited_receive, send)
