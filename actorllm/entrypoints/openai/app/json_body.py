"""vLLM's ``validate_json_request``: the routes that take a JSON body refuse a request
whose ``Content-Type`` is not ``application/json`` (parameters such as ``charset`` aside)
with its validation 400, before reading the body. The other routes take any body.

    >>> media_type("Application/JSON; charset=utf-8")
    'application/json'
"""

from __future__ import annotations

from typing import Any

from actorllm.entrypoints.openai.app.state import AppState, Handler
from actorllm.entrypoints.openai.errors import APIError

# vLLM 0.32's routes with the check that this server serves (/cohere/v2/chat checks it in
# its own handler, whose errors have Cohere's body).
JSON_BODY_PATHS = frozenset(
    {
        "/v1/completions",
        "/v1/chat/completions",
        "/v1/chat/completions/batch",
        "/v1/responses",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1/embeddings",
        "/v2/embed",
        "/pooling",
        "/classify",
        "/score",
        "/v1/score",
        "/rerank",
        "/v1/rerank",
        "/v2/rerank",
        "/tokenize",
        "/detokenize",
        "/invocations",
        "/generative_scoring",
        "/v1/load_lora_adapter",
        "/v1/unload_lora_adapter",
        # the scale-out API (--enable-scale-out; /cohere/v2/chat/render checks in its own)
        "/v1/chat/completions/render",
        "/v1/completions/render",
        "/v1/messages/render",
        "/v1/responses/render",
        "/v1/chat/completions/derender",
        "/v1/completions/derender",
        "/inference/v1/generate",
    }
)


def media_type(content_type: str) -> str:
    """The media type of a ``Content-Type`` header, lower case, without parameters."""
    return content_type.split(";", 1)[0].strip().lower()


def require_json(request: Any) -> None:
    """vLLM's 400 for a body that is not declared ``application/json``."""
    if media_type(request.headers.get("content-type", "")) != "application/json":
        raise APIError(
            400,
            "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed",
            kind="Bad Request",
        )


def json_only(path: str, fn: Handler) -> Handler:
    """``fn``, refusing first a request to a JSON route that is not declared JSON."""
    if path not in JSON_BODY_PATHS:
        return fn

    async def checked(state: AppState, request: Any) -> Any:
        require_json(request)
        return await fn(state, request)

    checked.__name__ = fn.__name__
    return checked
