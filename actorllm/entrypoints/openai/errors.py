"""HTTP errors with OpenAI's body: ``{"error": {"message", "type", "param", "code"}}``.

``type`` follows vLLM (``BadRequestError``, ``NotFoundError``, ...) and ``code`` is the HTTP
status, which is what the ``openai`` client reads into its exception classes.

:func:`to_api_error` is the one place that decides which status an exception gets: errors a
client can cause are 4xx, a dead engine is 503, an overloaded one 503 with ``Retry-After``,
and only genuine server bugs are 500.
"""

from __future__ import annotations

import logging
import math
import re
from http import HTTPStatus

import msgspec
from starlette.responses import Response

from actorllm.engine.errors import (
    EngineClosedError,
    EngineDeadError,
    EngineOverloadedError,
    RequestFailedError,
    SlowConsumerError,
)
from actorllm.entrypoints.openai.protocol.error_body import ErrorInfo, ErrorResponse

logger = logging.getLogger("actorllm.server")

_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    408: "RequestTimeoutError",
    413: "RequestTooLargeError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


class APIError(Exception):
    """An error that is sent to the client as-is, with its status and OpenAI-style body."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        *,
        retry_after_s: float | None = None,
        kind: str | None = None,
        detail: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.retry_after_s = retry_after_s  # sent as a Retry-After header (whole seconds)
        # The body's ``type`` where vLLM sends another than the status's (the Responses
        # API's "invalid_request_error", OpenAI's own).
        self.kind = kind
        # FastAPI's top-level "detail" beside the error (vLLM's 404 for a route not mounted)
        self.detail = detail

    def body(self) -> ErrorResponse:
        kind = (
            self.kind
            or _TYPES.get(self.status)
            or HTTPStatus(self.status).phrase.replace(" ", "") + "Error"
        )
        error = ErrorInfo(message=self.message, type=kind, param=self.param, code=self.status)
        if self.detail is None:
            return ErrorResponse(error=error)
        return ErrorResponse(error=error, detail=self.detail)

    def response(self) -> Response:
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else {}
        if self.retry_after_s is not None:
            headers["Retry-After"] = str(max(1, math.ceil(self.retry_after_s)))
        if self.status == 413:
            # The body was left unread, so this connection cannot carry another request:
            # say so, or a keep-alive client races the server's close on its next request.
            headers["Connection"] = "close"
        return Response(
            msgspec.json.encode(self.body()),
            status_code=self.status,
            media_type="application/json",
            headers=headers,
        )


def bad_request(message: str, param: str | None = None) -> APIError:
    return APIError(400, message, param)


# Objects whose errors name the field inside them (vLLM's structured_outputs.<field>).
_NESTED = frozenset(["structured_outputs"])


def from_validation_error(exc: msgspec.DecodeError) -> APIError:
    """A msgspec decode failure as a 400 naming the top-level field at fault.

    msgspec says where: ``... - at `$.messages[0].role``` or ``missing required field `x```.
    (``ValidationError`` subclasses ``DecodeError``; only the latter is malformed JSON.)
    """
    text = str(exc)
    param = None
    if (at := re.search(r"`\$\.(\w+)(\.\w+)?", text)) is not None:  # `$.a[0].b`, `key` in `$.a`
        param = at.group(1)
        if param in _NESTED:  # name the field inside: structured_outputs.regex
            unknown = re.match(r"Object contains unknown field `(\w+)`", text)
            inner = f".{unknown.group(1)}" if unknown else at.group(2)
            param += inner or ""
    elif text.startswith("Object missing required field `"):
        param = text.split("`")[1]
    if not isinstance(exc, msgspec.ValidationError):
        text = f"The request body is not valid JSON: {text}"
    elif (enum := re.match(r"Invalid enum value (.*) - at ", text)) is not None:
        # pydantic's error type, which vLLM's messages carry and its clients match on
        text += f" [type=literal_error, input_value={enum.group(1)}]"
    return APIError(400, text, param)


def to_api_error(exc: BaseException, *, engine_dead: bool = False) -> APIError:
    """Map an exception raised while serving a request to the error the client sees.

    ``engine_dead`` (the engine's ``is_dead``) turns any failure into a 503: once the engine
    is gone, whatever broke is not the client's fault and retrying elsewhere is the fix.
    """
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, msgspec.DecodeError):
        return from_validation_error(exc)
    if isinstance(exc, EngineOverloadedError):
        return APIError(503, str(exc), retry_after_s=exc.retry_after_s)
    if isinstance(exc, SlowConsumerError):  # the client stopped reading its stream
        return APIError(408, str(exc))
    if isinstance(exc, EngineDeadError | EngineClosedError) or engine_dead:
        return APIError(503, f"The engine is not available: {exc}")
    if isinstance(exc, ValueError):
        # SamplingParamsError, InvalidRequestError, EngineConfigError, core input errors.
        return APIError(400, str(exc), getattr(exc, "param", None))
    if isinstance(exc, RequestFailedError):
        logger.error("request %s failed in the engine: %s", exc.request_id, exc.reason)
        return APIError(500, str(exc))
    logger.error("unexpected error while serving a request", exc_info=exc)
    return APIError(500, f"Internal server error: {type(exc).__name__}.")
