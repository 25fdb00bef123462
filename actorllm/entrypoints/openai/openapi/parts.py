"""The pieces every part of the document is built from: where a component schema is
referenced, a JSON body, one server-sent event, and the error answers of an operation."""

from __future__ import annotations

from typing import Any

REF = "#/components/schemas/{name}"  # msgspec's ref_template: every $ref points here

_REASONS = {
    400: "Invalid request (the body says which field: `param`).",
    401: "Missing or wrong API key.",
    404: "Unknown model (or response id).",
    409: "Conflict (the prefix cache is in use).",
    413: "Request body too large.",
    500: "Server error.",
    503: "The engine is not running.",
}


def json_content(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def sse_event(chunk: dict[str, Any], error: dict[str, Any]) -> dict[str, Any]:
    """One server-sent event (OpenAPI 3.1: a streamed media type's schema is per event):
    a JSON chunk, an error body, or the closing ``[DONE]``."""
    json_data = {
        "type": "string",
        "contentMediaType": "application/json",
        "contentSchema": {"anyOf": [chunk, error]},
    }
    data = {"anyOf": [{"const": "[DONE]"}, json_data]}
    return {"type": "object", "required": ["data"], "properties": {"data": data}}


def error_responses(op: dict[str, Any], error: dict[str, Any], statuses: list[int]) -> None:
    """Add ``error`` (the error body's response) to ``op`` under each status, with the
    reason a route answers it."""
    for status in statuses:
        op["responses"][str(status)] = {**error, "description": _REASONS[status]}


def guarded_error_responses(
    op: dict[str, Any], error: dict[str, Any], statuses: list[int], guarded: bool
) -> None:
    """:func:`error_responses` for a route that ``guarded`` (an API key is set and the route
    checks it) also answers 401 for, under the bearer scheme."""
    if guarded:
        statuses = [*statuses, 401]
        op["security"] = [{"bearer": []}]
    error_responses(op, error, sorted(statuses))
