"""Pure-ASGI middleware in front of the routes: request ids (and request logging), API key,
request-body size; and :func:`load_middleware` for the user's own (``--middleware``).

The guards answer with OpenAI's error body themselves, before any handler runs, so a rejected
request costs no parsing and never reaches the engine.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib
import inspect
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware

from actorllm.entrypoints.openai.errors import APIError

Scope = dict[str, Any]
logger = logging.getLogger("actorllm.requests")


# Behind --api-key: vLLM's guarded prefixes (its OpenAI API and its other inference APIs;
# a bare prefix test, so /v1anything is guarded too) and SageMaker's /invocations, which
# vLLM leaves open. Everything else (health, metrics, version, load, tokenize, the
# OpenAPI document, the dev routes) stays open for probes and scrapers.
GUARDED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")
GUARDED_PATHS = frozenset({"/invocations"})


def route_path(scope: Mapping[str, Any]) -> str:
    """The path the router matches: ``path`` less ``root_path`` when it carries it
    (starlette's rule, ``starlette._utils.get_route_path``). A guard must judge this path,
    not ``path``: under ``--root-path /llm`` the request ``/llm/v1/models`` reaches the
    ``/v1/models`` route."""
    path: str = scope["path"]
    root_path: str = scope.get("root_path", "")
    if not root_path or not path.startswith(root_path):
        return path
    if path == root_path:
        return ""
    return path[len(root_path) :] if path[len(root_path)] == "/" else path


def is_guarded(path: str) -> bool:
    """Whether a route path needs the API key (when the server has one)."""
    return path.startswith(GUARDED_PREFIXES) or path in GUARDED_PATHS


class APIKeyMiddleware:
    """401 unless ``Authorization: Bearer <key>`` matches one of the keys, on the guarded
    routes (:func:`is_guarded`, judged on :func:`route_path`). Preflights (OPTIONS) pass:
    browsers send no credentials there. Put it inside :class:`RootPathMiddleware`, which
    sets the ``root_path`` it reads.

    The scheme is case-insensitive (``bearer`` too, as vLLM). Keys are compared as SHA-256
    digests, each in constant time and all of them every time, so the time taken tells
    neither which key came close nor how long a key is.
    """

    def __init__(self, app: Any, api_key: str | Sequence[str]) -> None:
        self.app = app
        keys = [api_key] if isinstance(api_key, str) else list(api_key)
        self._digests = [hashlib.sha256(key.encode()).digest() for key in keys]

    def _accepts(self, authorization: bytes) -> bool:
        scheme, _, token = authorization.partition(b" ")
        if scheme.lower() != b"bearer":
            return False
        digest = hashlib.sha256(token).digest()
        results = [hmac.compare_digest(digest, expected) for expected in self._digests]
        return any(results)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] != "OPTIONS"
            and is_guarded(route_path(scope))
        ):
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not self._accepts(given):
                response = APIError(401, "Invalid or missing API key.").response()
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class BodyLimitMiddleware:
    """413 for a body over ``max_bytes`` (``route_limits``: another limit for those paths,
    under the root path too): on ``Content-Length`` before reading anything, and while the
    body streams in (chunked uploads), by raising ``APIError(413)`` from ``receive`` — the
    handler turns it into the response."""

    def __init__(
        self, app: Any, max_bytes: int, route_limits: Mapping[str, int] | None = None
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.route_limits = dict(route_limits or {})

    def _limit(self, scope: Scope) -> int:
        path, root = scope["path"], scope.get("root_path") or ""
        if root and path.startswith(root):
            path = path[len(root) :]
        return self.route_limits.get(path, self.max_bytes)

    @staticmethod
    def _too_large(limit: int) -> APIError:
        return APIError(413, f"The request body exceeds the limit of {limit} bytes.")

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self._limit(scope)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            error = (
                self._too_large(limit) if length.isdigit() else APIError(400, "Bad Content-Length.")
            )
            await error.response()(scope, receive, send)
            return
        received = 0

        async def limited_receive() -> Any:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise self._too_large(limit)
            return message

        await self.app(scope, limited_receive, send)


REQUEST_ID_HEADER = b"x-request-id"


def request_id_of(scope: Mapping[str, Any]) -> str | None:
    """The id :class:`RequestIdMiddleware` gave this request, if the caller sent one."""
    state = scope.get("state") or {}
    given = state.get("request_id_given")
    return str(given) if given else None


class RequestIdMiddleware:
    """Each HTTP request's id: the caller's ``X-Request-Id`` when it sent one (it also
    becomes the engine request's id), else a fresh one. With ``echo`` (vLLM's
    ``--enable-request-id-headers``) every response carries it as ``X-Request-Id``.

    A response that starts before the request's body was read to its end (an early 401,
    404, 405 or 400 from a guard or the router) also says ``Connection: close``: the unread
    body makes the connection unusable, and a keep-alive client told nothing would race the
    server's close with its next request.

    With ``log_requests`` it also logs each request as it arrives (id, method, path and the
    first ``max_log_len`` characters of its body) and as its response starts (status).
    """

    def __init__(
        self,
        app: Any,
        *,
        echo: bool = False,
        log_requests: bool = False,
        max_log_len: int | None = None,
    ) -> None:
        self.app = app
        self.echo = echo
        self.log_requests = log_requests
        self.max_log_len = max_log_len

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_headers = dict(scope["headers"])
        given = request_headers.get(REQUEST_ID_HEADER, b"").decode("latin-1").strip()
        request_id = given or uuid.uuid4().hex
        # True once the request's body was read to its end (at once when it has none).
        body_read = b"transfer-encoding" not in request_headers and request_headers.get(
            b"content-length", b"0"
        ) in (b"0", b"")
        scope.setdefault("state", {})["request_id_given"] = given or None
        header = (REQUEST_ID_HEADER, request_id.encode("latin-1"))
        # Requests without a body are logged now; the others with their body's first chunk.
        logged_body = not self.log_requests or scope["method"] in ("GET", "HEAD", "OPTIONS")
        if self.log_requests and logged_body:
            logger.info("request %s: %s %s", request_id, scope["method"], scope["path"])

        async def tracking_receive() -> Any:
            nonlocal logged_body, body_read
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                body_read = True
            if not logged_body and message["type"] == "http.request":
                logged_body = True
                body = message.get("body", b"").decode("utf-8", "replace")
                if self.max_log_len is not None:
                    body = body[: self.max_log_len]
                logger.info(
                    "request %s: %s %s %s", request_id, scope["method"], scope["path"], body
                )
            return message

        async def send_with_id(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if self.echo:
                    headers = [h for h in headers if h[0] != REQUEST_ID_HEADER]
                    headers.append(header)
                if not body_read and not any(h[0] == b"connection" for h in headers):
                    headers.append((b"connection", b"close"))
                message = {**message, "headers": headers}
                if self.log_requests:
                    logger.info("request %s: status %d", request_id, message["status"])
            await send(message)

        await self.app(scope, tracking_receive, send_with_id)


class RootPathMiddleware:
    """Sets the ASGI ``root_path`` (``--root-path``): the prefix a reverse proxy serves the
    API under. Routing strips it when the path carries it and matches as is when the proxy
    already stripped it, so both forms reach the same route."""

    def __init__(self, app: Any, root_path: str) -> None:
        self.app = app
        self.root_path = root_path.rstrip("/")

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            scope = {**scope, "root_path": self.root_path}
        await self.app(scope, receive, send)


def load_middleware(paths: Sequence[str]) -> list[Middleware]:
    """``--middleware`` import paths (``package.module.name``) -> Starlette middleware, by
    vLLM's rule: a class is an ASGI middleware, built as ``cls(app)``; a coroutine function
    is an HTTP middleware, ``async def f(request, call_next) -> response``. Raises
    ``ValueError`` naming the path when it cannot be imported or is neither."""
    out: list[Middleware] = []
    for path in paths:
        module_name, _, name = path.rpartition(".")
        try:
            obj: Any = getattr(importlib.import_module(module_name), name)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ValueError(f"--middleware {path}: cannot import it ({exc}).") from exc
        if inspect.isclass(obj):
            factory: Any = obj  # an ASGI middleware class: cls(app, **options)
            out.append(Middleware(factory))
        elif inspect.iscoroutinefunction(obj):
            out.append(Middleware(BaseHTTPMiddleware, dispatch=obj))
        else:
            raise ValueError(
                f"--middleware {path}: not an ASGI middleware class nor an async "
                "function (request, call_next)."
            )
    return out
