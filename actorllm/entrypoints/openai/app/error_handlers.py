"""What answers when no handler did: unknown routes (404) and wrong methods (405) get the
OpenAI error body every handler's errors get; a bug that escaped is logged and a 500."""

from __future__ import annotations

import logging

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from actorllm.entrypoints.openai.errors import APIError

logger = logging.getLogger("actorllm.server")


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    messages = {404: f"Not found: {request.url.path}", 405: f"Method {request.method} not allowed."}
    detail = "Not Found" if exc.status_code == 404 else None  # FastAPI's, as vLLM's app
    message = messages.get(exc.status_code, str(exc.detail))
    response = APIError(exc.status_code, message, detail=detail).response()
    if exc.headers:
        response.headers.update(exc.headers)
    return response


async def server_error(request: Request, exc: Exception) -> Response:
    logger.error("unhandled error", exc_info=exc)
    return APIError(500, "Internal server error.").response()


EXCEPTION_HANDLERS = {HTTPException: http_error, Exception: server_error}
