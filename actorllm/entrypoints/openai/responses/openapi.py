"""The Responses API's part of the OpenAPI document (the ``openapi`` package assembles it)."""

from __future__ import annotations

from typing import Any

from actorllm.entrypoints.openai.protocol.error_body import ErrorResponse
from actorllm.entrypoints.openai.responses.request import ResponsesRequest
from actorllm.entrypoints.openai.responses.response import ResponsesResponse

RESPONSES_STRUCTS: list[type] = [ResponsesRequest, ResponsesResponse]

_RULES = (
    " The input (with `instructions` and the stored conversation of "
    "`previous_response_id`) must leave room in the context for one output token "
    '(`truncation: "auto"` cuts its start instead); `max_output_tokens` is cut to the '
    'room left. Function `tools` with `tool_choice` "auto" (the default) need the server '
    "started with `--enable-auto-tool-choice` and a chat template that renders tools; "
    "`text.format` and `structured_outputs` must compile (one of the two). "
    "`previous_response_id` names a stored response (store on: "
    "`ACTORLLM_ENABLE_RESPONSES_API_STORE=1`), else 404. Built-in tools, image and file "
    "inputs, prompt templates and streamed background responses are refused (400, naming "
    "them). `background: true` (store on) answers the queued response at once; poll it "
    "with GET, stop it with cancel."
)


def responses_rules(components: dict[str, Any], *, store: bool, harmony: bool = False) -> None:
    """What the structs cannot say: a message item may leave ``type`` out (OpenAI's easy
    input message); ``previous_input_messages`` is for a gpt-oss model (``harmony``) only,
    not with ``previous_response_id``; ``enable_response_messages`` is not for the
    background; ``background`` needs the store (``store``: this server
    has it on) and is not streamed."""
    components["MessageItem"]["required"].remove("type")
    request = components["ResponsesRequest"]
    req = request["properties"]
    del req["input"]["anyOf"][1]["items"]["discriminator"]  # a message's type is optional
    _harmony_rules(request, harmony)
    req["background"] = {
        "type": ["boolean", "null"],
        "default": False,
        "description": "Run beside the server: the answer is the queued response (store "
        "on; not with stream).",
    }
    if not store:  # vLLM's 400 without the store
        req["background"]["enum"] = [False, None]
        return
    background = {"properties": {"background": {"const": True}}, "required": ["background"]}
    streamed = {"properties": {"stream": {"enum": [False, None]}}}
    request.setdefault("allOf", []).append({"if": background, "then": streamed})


def _harmony_rules(request: dict[str, Any], harmony: bool) -> None:
    """The 400s of ``serving._harmony_history`` as schema: ``previous_input_messages`` on
    gpt-oss only, and not beside ``previous_response_id``; ``enable_response_messages``
    (any model) not with ``background``."""
    req = request["properties"]
    given = {"not": {"type": "null"}}
    rules = request.setdefault("allOf", [])
    if not harmony:
        req["previous_input_messages"] = {"type": "null", "description": "gpt-oss models only."}
    else:
        rules.append({
            "if": {"properties": {"previous_input_messages": given},
                   "required": ["previous_input_messages"]},
            "then": {"properties": {"previous_response_id": {"type": "null"}}},
        })  # fmt: skip
    rules.append({
        "if": {"properties": {"enable_response_messages": {"const": True}},
               "required": ["enable_response_messages"]},
        "then": {"properties": {"background": {"enum": [False, None]}}},
    })  # fmt: skip


def _id_param() -> dict[str, Any]:
    return {"name": "response_id", "in": "path", "required": True, "schema": {"type": "string"}}


def responses_paths(
    ref: dict[type, Any], api_key: bool
) -> dict[str, dict[str, tuple[dict[str, Any], list[int]]]]:
    """{path: {method: (operation, its error statuses)}}."""
    response = {"content": {"application/json": {"schema": ref[ResponsesResponse]}}}
    event = {
        "type": "object",
        "required": ["event", "data"],
        "properties": {
            "event": {"type": "string"},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": {
                    "anyOf": [
                        {
                            "type": "object",
                            "required": ["type", "sequence_number"],
                            "properties": {
                                "type": {"type": "string"},
                                "sequence_number": {"type": "integer", "minimum": 0},
                            },
                        },
                        ref[ErrorResponse],
                    ]
                },
            },
        },
    }
    ok = {"description": "OK", **response}
    content: dict[str, Any] = {**response["content"], "text/event-stream": {"schema": event}}
    created = {"description": "OK", "content": content}
    summary = (
        "Create a model response (SSE of response.* events, each named by `event:`, when "
        "stream=true)."
    )
    create: dict[str, Any] = {
        "summary": summary,
        "description": summary + _RULES,
        "tags": ["openai"],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": ref[ResponsesRequest]}},
        },
        "responses": {"200": created},
    }
    retrieve: dict[str, Any] = {
        "summary": (
            "A stored response (404 unless the store is on and holds it); with stream=true, "
            "the events of one created with background and stream, replayed, then followed "
            "until its run ends."
        ),
        "tags": ["openai"],
        "parameters": [
            _id_param(),
            {
                "name": "stream",
                "in": "query",
                "required": False,
                "schema": {"type": "boolean", "default": False},
            },
            {
                "name": "starting_after",
                "in": "query",
                "required": False,
                "schema": {"type": "integer", "minimum": 0},
                "description": "With stream=true: the events after this sequence number.",
            },
        ],
        "responses": {"200": created},
    }
    cancel: dict[str, Any] = {
        "summary": "Cancel a running background response (a finished one: 400).",
        "tags": ["openai"],
        "parameters": [_id_param()],
        "responses": {"200": ok},
    }
    paths = {
        "/v1/responses": {"post": (create, [400, 404, 413, 500, 503])},
        "/v1/responses/{response_id}": {"get": (retrieve, [400, 404, 500, 503])},
        "/v1/responses/{response_id}/cancel": {"post": (cancel, [400, 404, 500, 503])},
    }
    if api_key:
        for ops in paths.values():
            for op, statuses in ops.values():
                op["security"] = [{"bearer": []}]
                statuses.append(401)
                statuses.sort()
    return paths
