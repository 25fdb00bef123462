"""The OpenAPI 3.1 document served at /openapi.json: schemas generated from the msgspec
protocol structs (``msgspec.json.schema_components``), so it cannot drift from the code.

It tells the truth about *this* server: bounds that depend on the served model (token ids
below the vocabulary size, ``max_tokens`` below the context length, ``priority`` only 0
under the fcfs policy) are filled in from :class:`Served`; the rules between fields that
JSON Schema can state are added to the generated schemas (:func:`_cross_field_rules`); the
ones it cannot (prompt tokens + ``max_tokens`` within the context, ``min_tokens <=
max_tokens``) are written in each operation's description. Authentication is documented
only when an API key is set, and every status a route can answer is listed.

    >>> doc = openapi_document(dev_mode=False, api_key=False, served=Served(64, 100, "fcfs"))
    >>> doc["components"]["schemas"]["CompletionRequest"]["properties"]["max_tokens"]
    {'anyOf': [{'type': 'integer', 'minimum': 1, 'maximum': 63}, {'type': 'null'}], 'default': 16}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from actorllm import __version__
from actorllm.entrypoints.openai import dev_rpc
from actorllm.entrypoints.openai import protocol as p
from actorllm.entrypoints.openai.beam_request import RULES as BEAM_RULES
from actorllm.entrypoints.openai.fields import UNSUPPORTED
from actorllm.entrypoints.openai.lora_models import LoadLoRAAdapterRequest, UnloadLoRAAdapterRequest
from actorllm.entrypoints.openai.middleware import is_guarded
from actorllm.entrypoints.openai.preprocess import reserved_template_kwargs
from actorllm.entrypoints.openai.protocol import pooling as pp
from actorllm.entrypoints.openai.responses.openapi import (
    RESPONSES_STRUCTS,
    responses_paths,
    responses_rules,
)
from actorllm.entrypoints.openai.serving_chat_batch import BatchChatCompletionRequest

_REF = "#/components/schemas/{name}"
_BATCH = "BatchChatCompletionRequest"


@dataclass(frozen=True, slots=True)
class Served:
    """What the document needs to know about the served model."""

    max_model_len: int
    vocab_size: int
    scheduling_policy: str
    trust_request_chat_template: bool = False  # a request's chat_template is accepted
    max_logprobs: int = 20  # --max-logprobs; -1: the vocabulary size
    tokenizer_info: bool = False  # GET /tokenizer_info exists (--enable-tokenizer-info-endpoint)
    # A pooling model's tasks (embed, classify, token_embed); empty: a generative model.
    # The document lists the routes that serve this model: generation or pooling ones.
    pooling_tasks: tuple[str, ...] = ()
    cross_encoder: bool = False  # a one-label classifier: /score and /rerank read pairs
    has_chat_template: bool = True  # the tokenizer has one: pooling requests take messages
    matryoshka: bool = False  # embeddings may be cut (`dimensions`)
    embedding_size: int = 0
    prompt_embeds: bool = False  # --enable-prompt-embeds: completions take prompt_embeds
    # POST /v1/load_lora_adapter and /v1/unload_lora_adapter exist
    # (ACTORLLM_ALLOW_RUNTIME_LORA_UPDATING)
    runtime_lora: bool = False
    # ACTORLLM_ENABLE_RESPONSES_API_STORE: /v1/responses may store and run in the background
    responses_store: bool = False


_GENERATION_RULES = (
    " Rules between fields: the prompt's tokens plus `max_tokens` must fit the context "
    "length (this model's `max_model_len`, see /v1/models); `min_tokens` must not exceed "
    "`max_tokens`. Fields this server cannot honour yet accept only their 'off' values "
    "(each says so); unknown fields are ignored (and logged). At most one structured-output "
    "constraint (`response_format`, `structured_outputs`, `guided_*`), and it must compile: "
    "a regex or grammar that parses, a JSON schema the grammar backend accepts, "
    "`guided_decoding_backend` / `guided_whitespace_pattern` only beside one; `tools` with "
    '`tool_choice` "auto" (the default) need the server started with '
    "`--enable-auto-tool-choice`; a named `tool_choice` must name one of `tools`." + BEAM_RULES
)

# (method, path, request struct or None, response struct or None, summary, tag)
_ENDPOINTS: list[tuple[str, str, type | None, type | None, str, str]] = [
    (
        "post",
        "/v1/completions",
        p.CompletionRequest,
        p.CompletionResponse,
        "Create a completion (SSE when stream=true).",
        "openai",
    ),
    (
        "post",
        "/v1/chat/completions",
        p.ChatCompletionRequest,
        p.ChatCompletionResponse,
        "Create a chat completion (SSE of ChatCompletionChunk when stream=true).",
        "openai",
    ),
    (
        "post",
        "/v1/chat/completions/batch",
        BatchChatCompletionRequest,
        p.ChatCompletionResponse,
        "Chat completions of several conversations (vLLM's): choice i answers "
        "conversation i; no streaming, tools or n > 1.",
        "openai",
    ),
    ("get", "/v1/models", None, p.ModelList, "List the served model.", "openai"),
    (
        "post",
        "/tokenize",
        p.TokenizeRequest,
        p.TokenizeResponse,
        "Tokenize a prompt or chat messages.",
        "tokenizer",
    ),
    (
        "post",
        "/detokenize",
        p.DetokenizeRequest,
        p.DetokenizeResponse,
        "Decode token ids.",
        "tokenizer",
    ),
    ("get", "/health", None, None, "200 while the engine is alive, 503 once it is dead.", "ops"),
    ("get", "/ping", None, None, "Liveness probe (SageMaker's name): as /health.", "ops"),
    ("post", "/ping", None, None, "Liveness probe (SageMaker's name): as /health.", "ops"),
    ("get", "/metrics", None, None, "Prometheus metrics (text exposition format).", "ops"),
    ("get", "/version", None, p.VersionResponse, "Server version.", "ops"),
    (
        "get",
        "/load",
        None,
        p.LoadResponse,
        "Generation requests in flight (0 without --enable-server-load-tracking).",
        "ops",
    ),
]
# Generation routes: a pooling model answers 400 (the document leaves them out for it).
_GENERATION_PATHS = frozenset({"/v1/completions", "/v1/chat/completions", "/invocations"})
_POOLING_RULES = (
    " Exactly one of `input` and `messages`. Every prompt must fit the context length "
    "(this model's `max_model_len`, see /v1/models) unless `truncate_prompt_tokens` cuts it."
)
_SCORE_RULES = (
    " The two sides pair up 1:1, 1:N (one query against every document) or N:N; every pair "
    "must fit the context length."
)
# (path, request, response, summary, what the model must offer): served for a pooling model
_POOLING_ENDPOINTS: list[tuple[str, type, type, str, str]] = [
    ("/v1/embeddings", pp.EmbeddingRequest, pp.EmbeddingResponse, "Create embeddings.", "embed"),
    ("/pooling", pp.PoolingRequest, pp.PoolingResponse, "Pooled outputs (any task).", "any"),
    ("/classify", pp.ClassificationRequest, pp.ClassificationResponse, "Classify.", "classify"),
    ("/score", pp.ScoreRequest, pp.ScoreResponse, "Score text pairs.", "score"),
    ("/v1/score", pp.ScoreRequest, pp.ScoreResponse, "Score text pairs.", "score"),
    ("/rerank", pp.RerankRequest, pp.RerankResponse, "Rerank documents.", "score"),
    ("/v1/rerank", pp.RerankRequest, pp.RerankResponse, "Rerank documents.", "score"),
    ("/v2/rerank", pp.RerankRequest, pp.RerankResponse, "Rerank documents.", "score"),
]


def _served_pooling(components: dict[str, Any], served: Served) -> None:
    """The pooling fields whose values depend on the served model: the tasks it has, and
    ``dimensions`` (matryoshka models only, up to the embedding size)."""
    tasks = [t for t in ("embed", "classify", "token_embed") if t in served.pooling_tasks]
    components["PoolingRequest"]["properties"]["task"] = {
        "anyOf": [{"enum": tasks}, {"type": "null"}],
        "default": None,
    }
    for name in ("EmbeddingRequest", "PoolingRequest"):
        props = components[name]["properties"]
        if served.matryoshka:
            props["dimensions"]["anyOf"][0]["maximum"] = served.embedding_size
        else:
            props["dimensions"] = {
                "type": "null",
                "description": "Refused: the model has no matryoshka embeddings.",
            }


def _pooling_served(needs: str, served: Served) -> bool:
    tasks = served.pooling_tasks
    if needs == "any":
        return bool(tasks)
    if needs == "score":  # a cross-encoder, or a bi-encoder's cosine
        return served.cross_encoder or "embed" in tasks
    return needs in tasks


_DEV_ENDPOINTS: list[tuple[str, str, str]] = [
    ("post", "/sleep", "Put the engine to sleep (query: level, mode=abort|wait|keep)."),
    ("post", "/wake_up", "Wake the engine up (query: tags=weights|kv_cache, repeatable)."),
    ("get", "/is_sleeping", "Whether the engine sleeps."),
    ("post", "/pause", "Pause generation (query: mode=abort|wait|keep, clear_cache)."),
    ("post", "/resume", "Resume generation after a pause."),
    ("get", "/is_paused", "Whether generation is paused."),
    ("get", "/server_info", "The engine's configuration and versions (query: config_format)."),
    ("post", "/reset_prefix_cache", "Drop every cached prefix block."),
    ("post", "/kv_connector/toggle", "Switch the KV connector (query: enabled=true|false)."),
    ("get", "/kv_connector/enabled", "Whether the KV connector is switched on."),
    ("post", "/collective_rpc", "Call a worker method on every rank; one result per rank."),
    ("post", "/start_profile", "Start the torch profiler on every rank."),
    ("post", "/stop_profile", "Stop the profiler and write its traces."),
    ("post", "/init_weight_transfer_engine", "Join a trainer's weight-transfer group."),
    ("post", "/shutdown_weight_transfer_engine", "Leave the weight-transfer group."),
    ("post", "/start_weight_update", "Open a weight update."),
    ("post", "/update_weights", "Receive and stage tensors broadcast by the trainer."),
    ("post", "/finish_weight_update", "Apply the staged weights at a step boundary."),
    ("post", "/update_weight_version", "Label later tokens with a new weight version."),
    ("get", "/weight_info", "The current weight version."),
    ("get", "/get_world_size", "The engine's worker ranks (query: include_dp)."),
]


def _json(ref: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": ref}}}


def digits_below(n: int) -> str:
    """A regex matching the decimal numbers 0 .. n-1 (no leading zeros).

    >>> import re
    >>> [k for k in range(130) if re.fullmatch(digits_below(103), str(k))] == list(range(103))
    True
    """
    top = str(n - 1)
    alts = ["0"] if n >= 1 else []
    for width in range(1, len(top)):  # every shorter width, whole range
        alts.append("[1-9]" + "[0-9]" * (width - 1) if width > 1 else "[1-9]")
    # same width as n - 1: at each position, a smaller digit then anything, or equal
    for i, d in enumerate(top):
        lo = "1" if i == 0 else "0"
        if int(d) > int(lo):
            rest = "[0-9]" * (len(top) - i - 1)
            alts.append(f"{top[:i]}[{lo}-{int(d) - 1}]{rest}")
    if top != "0":
        alts.append(top)
    return "^(" + "|".join(dict.fromkeys(alts)) + ")$"


def _fill_served(node: Any, served: Served) -> None:
    """Fill the ``x-served`` bounds in place (see protocol/bounds.py)."""
    if isinstance(node, list):
        for item in node:
            _fill_served(item, served)
        return
    if not isinstance(node, dict):
        return
    kind = node.pop("x-served", None)
    if kind == "token":
        node["maximum"] = served.vocab_size - 1
    elif kind == "token_key":
        node["pattern"] = digits_below(served.vocab_size)
    elif kind == "max_tokens":
        node["maximum"] = served.max_model_len - 1  # the prompt takes at least one token
    elif kind == "logprobs":  # -1 is the vocabulary size: within the limit or not
        limit = served.vocab_size if served.max_logprobs == -1 else served.max_logprobs
        node["maximum"] = limit
        node["minimum"] = -1 if served.vocab_size <= limit else 0
    elif kind == "priority" and served.scheduling_policy != "priority":
        node["minimum"] = node["maximum"] = 0
    for value in node.values():
        _fill_served(value, served)


def _prompt_forms(components: dict[str, Any]) -> dict[str, Any]:
    """The four forms of a completion prompt (msgspec allows one array type per union)."""
    token = components["CompletionRequest"]["properties"]["prompt"]["anyOf"][1]["items"]
    token = next(t for t in token["anyOf"] if t.get("type") == "integer")
    text = {"type": "string", "minLength": 1}
    ids = {"type": "array", "items": token, "minItems": 1}
    return {
        "anyOf": [
            text,
            {"type": "array", "items": text, "minItems": 1},
            ids,
            {"type": "array", "items": ids, "minItems": 1},
        ]
    }


def _completion_prompt_rule(schema: dict[str, Any], embeds: bool) -> None:
    """A completion needs a non-empty ``prompt`` or, with --enable-prompt-embeds, non-empty
    ``prompt_embeds`` (then ``prompt`` may be ``""``); without the flag ``prompt_embeds``
    takes only its off values."""
    forms = schema["properties"]["prompt"]
    schema["properties"]["prompt"] = {"anyOf": [*forms["anyOf"], {"type": "null"}]}
    need = [{"required": ["prompt"], "properties": {"prompt": forms}}]
    if embeds:
        item = {"type": "string", "minLength": 1, "contentEncoding": "base64"}
        schema["properties"]["prompt_embeds"] = {
            "anyOf": [item, {"type": "array", "items": item}, {"type": "null"}],
            "description": "base64 of torch.save(tensor [seq_len, hidden_size]), or a list.",
        }
        schema["properties"]["prompt"]["anyOf"].append({"const": ""})
        need.append(
            {
                "required": ["prompt_embeds"],
                "properties": {
                    "prompt_embeds": {
                        "anyOf": [item, {"type": "array", "items": item, "minItems": 1}]
                    }
                },
            }
        )
    else:
        schema["properties"]["prompt_embeds"] = {
            "anyOf": [{"type": "null"}, {"type": "array", "maxItems": 0}],
            "description": "Refused: the server was not started with --enable-prompt-embeds.",
        }
    schema["anyOf"] = need
    required = [r for r in schema.get("required", []) if r != "prompt"]
    if required:
        schema["required"] = required
    else:
        schema.pop("required", None)


def _content_parts_rule(components: dict[str, Any], embeds: bool) -> None:
    """Chat content parts: ``prompt_embeds`` parts with --enable-prompt-embeds (non-empty
    base64 ``data``; chat completions only), else text parts alone."""
    part = components.get("PromptEmbedsContentPart")
    if part is None:
        return
    if embeds:
        part["properties"]["data"] = {
            "type": "string",
            "minLength": 1,
            "contentEncoding": "base64",
            "description": "base64 of torch.save(tensor [num_tokens, hidden_size]); "
            "taken by /v1/chat/completions only.",
        }
        part["required"] = ["type", "data"]
        return
    del components["PromptEmbedsContentPart"]
    text = {"$ref": _REF.format(name="TextContentPart")}

    def only_text(node: Any) -> Any:
        if isinstance(node, dict):
            mapping = node.get("discriminator", {}).get("mapping", {})
            if "prompt_embeds" in mapping and "text" in mapping:
                return text
            return {k: only_text(v) for k, v in node.items()}
        if isinstance(node, list):
            return [only_text(v) for v in node]
        return node

    for name in list(components):
        components[name] = only_text(components[name])


def _if_set(field: str, value: Any = None) -> dict[str, Any]:
    cond: dict[str, Any] = {"required": [field]}
    cond["properties"] = {
        field: {"const": value} if value is not None else {"not": {"type": "null"}}
    }
    return cond


def _cross_field_rules(components: dict[str, Any]) -> None:
    """Rules between fields that JSON Schema can state, added to the generated schemas."""
    components["CompletionRequest"]["properties"]["prompt"] = _prompt_forms(components)
    not_both = {  # continue_final_message needs add_generation_prompt: false
        "if": _if_set("continue_final_message", True),
        "then": _if_set("add_generation_prompt", False),
    }
    reserved = {"propertyNames": {"not": {"enum": sorted(reserved_template_kwargs())}}}
    for name in ("ChatCompletionRequest", "TokenizeRequest", _BATCH):
        schema = components[name]
        schema.setdefault("allOf", []).append(not_both)
    for name in ("ChatCompletionRequest", "TokenizeRequest", "ResponsesRequest", _BATCH):
        kwargs = components[name]["properties"]["chat_template_kwargs"]
        kwargs["anyOf"][0].update(reserved)
    asks_top = _if_set("top_logprobs")
    asks_top["properties"]["top_logprobs"] = {"not": {"enum": [None, 0]}}  # 0 asks nothing
    for name in ("ChatCompletionRequest", _BATCH):  # top_logprobs needs logprobs
        components[name]["allOf"].append({"if": asks_top, "then": _if_set("logprobs", True)})
    batch = components[_BATCH]["properties"]  # vLLM's batch limits
    batch["stream"] = {"const": False, "default": False, "description": "Not supported."}
    batch["n"] = {"const": 1, "default": 1, "description": "Not supported: n > 1."}
    batch["tools"] = {"type": "null", "default": None, "description": "Not supported."}
    batch["tool_choice"] = {"enum": ["none", None], "default": None}
    components["TokenizeRequest"]["oneOf"] = [{"required": ["prompt"]}, {"required": ["messages"]}]
    for name in (
        "CompletionRequest",
        "ChatCompletionRequest",
        "TokenizeRequest",
        "DetokenizeRequest",
        "ResponsesRequest",
        _BATCH,
    ):
        props = components[name]["properties"]
        for field, refusal in UNSUPPORTED.items():
            props.setdefault(field, refusal.schema())
    # vLLM: stream_options (a non-empty one) only with stream: true.
    no_options = {"anyOf": [{"type": "null"}, {"type": "object", "maxProperties": 0}]}
    options_need_stream = {
        "if": {"not": _if_set("stream", True)},
        "then": {"properties": {"stream_options": no_options}},
    }
    for name in ("CompletionRequest", "ChatCompletionRequest", _BATCH):
        truncate = components[name]["properties"]["truncate_prompt_tokens"]["anyOf"][0]
        truncate["not"] = {"const": 0}  # -1 or at least 1
        components[name].setdefault("allOf", []).append(options_need_stream)
    _pooling_rules(components, reserved)


def _pooling_rules(components: dict[str, Any], reserved: dict[str, Any]) -> None:
    """The pooling requests' rules between fields (see _cross_field_rules)."""
    inputs = ("EmbeddingRequest", "PoolingRequest", "ClassificationRequest")
    for name in (*inputs, "ScoreRequest", "RerankRequest"):
        schema = components[name]
        props = schema["properties"]
        props["truncate_prompt_tokens"]["anyOf"][0]["not"] = {"const": 0}
        for field, refusal in UNSUPPORTED.items():
            props.setdefault(field, refusal.schema())
    for name in inputs:
        schema = components[name]
        schema["properties"]["input"] = components["CompletionRequest"]["properties"]["prompt"]
        schema["oneOf"] = [{"required": ["input"]}, {"required": ["messages"]}]
        schema["properties"]["chat_template_kwargs"]["anyOf"][0].update(reserved)
        schema.setdefault("allOf", []).append(
            {"if": _if_set("continue_final_message", True),
             "then": _if_set("add_generation_prompt", False)}
        )  # fmt: skip
    pairs = [("text_1", "text_2"), ("queries", "documents"), ("queries", "items"),
             ("data_1", "data_2")]  # fmt: skip
    components["ScoreRequest"]["oneOf"] = [{"required": list(pair)} for pair in pairs]


def _event(chunk: dict[str, Any], error: dict[str, Any]) -> dict[str, Any]:
    """One server-sent event (OpenAPI 3.1: a streamed media type's schema is per event):
    a JSON chunk, an error body, or the closing ``[DONE]``."""
    json_data = {
        "type": "string",
        "contentMediaType": "application/json",
        "contentSchema": {"anyOf": [chunk, error]},
    }
    data = {"anyOf": [{"const": "[DONE]"}, json_data]}
    return {"type": "object", "required": ["data"], "properties": {"data": data}}


def _responses(op: dict[str, Any], error: dict[str, Any], statuses: list[int]) -> None:
    reasons = {
        400: "Invalid request (the body says which field: `param`).",
        401: "Missing or wrong API key.",
        404: "Unknown model (or response id).",
        409: "Conflict (the prefix cache is in use).",
        413: "Request body too large.",
        500: "Server error.",
        503: "The engine is not running.",
    }
    for status in statuses:
        op["responses"][str(status)] = {**error, "description": reasons[status]}


def _invocations(ref: dict[type, Any], error: dict[str, Any], api_key: bool) -> dict[str, Any]:
    """SageMaker's ``POST /invocations``: a chat completion request (it has ``messages``)
    or a completion request (it has none), answered as that route answers."""
    completion = {"allOf": [ref[p.CompletionRequest]], "properties": {"messages": False}}
    body = {"anyOf": [ref[p.ChatCompletionRequest], completion]}
    ok = {
        "description": "OK",
        **_json({"anyOf": [ref[p.ChatCompletionResponse], ref[p.CompletionResponse]]}),
    }
    chunks = {"anyOf": [ref[p.ChatCompletionChunk], ref[p.CompletionResponse]]}
    ok["content"]["text/event-stream"] = {"schema": _event(chunks, ref[p.ErrorResponse])}
    summary = (
        "SageMaker's inference route: a chat completion when the body has messages, "
        "else a completion."
    )
    op: dict[str, Any] = {
        "summary": summary,
        "description": summary + _GENERATION_RULES,
        "tags": ["openai"],
        "requestBody": {"required": True, **_json(body)},
        "responses": {"200": ok},
    }
    statuses = [400, 404, 413, 500, 503]
    if api_key:
        statuses.append(401)
        op["security"] = [{"bearer": []}]
    _responses(op, error, sorted(statuses))
    return op


_LORA_ENDPOINTS = (
    (
        "/v1/load_lora_adapter",
        LoadLoRAAdapterRequest,
        "Load a LoRA adapter from a local directory (PEFT's format) under `lora_name`; "
        "400 naming the adapter and the reason for a bad one, or for a name already loaded "
        "unless `load_inplace`.",
    ),
    (
        "/v1/unload_lora_adapter",
        UnloadLoRAAdapterRequest,
        "Unload the LoRA adapter `lora_name`; 404 for one not loaded.",
    ),
)


def _lora_paths(
    paths: dict[str, dict[str, Any]], components: dict[str, Any], error: Any, api_key: bool
) -> None:
    """The runtime adapter routes (served only with ACTORLLM_ALLOW_RUNTIME_LORA_UPDATING)."""
    structs = [req for _, req, _ in _LORA_ENDPOINTS]
    refs, schemas = msgspec.json.schema_components(structs, ref_template=_REF)
    components.update(schemas)
    for (path, _, summary), ref in zip(_LORA_ENDPOINTS, refs, strict=True):
        ok = {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}}
        op: dict[str, Any] = {
            "summary": summary,
            "tags": ["lora"],
            "requestBody": {"required": True, **_json(ref)},
            "responses": {"200": ok},
        }
        statuses = [400, 404, 500, 503]
        if is_guarded(path) and api_key:
            statuses.append(401)
            op["security"] = [{"bearer": []}]
        _responses(op, error, sorted(statuses))
        paths[path] = {"post": op}


def openapi_document(*, dev_mode: bool, api_key: bool, served: Served) -> dict[str, Any]:
    structs = [t for _, _, req, resp, _, _ in _ENDPOINTS for t in (req, resp) if t is not None]
    structs += [t for _, req, resp, _, _ in _POOLING_ENDPOINTS for t in (req, resp)]
    structs = list(dict.fromkeys(structs))
    everything = [*structs, p.ChatCompletionChunk, p.ErrorResponse, *RESPONSES_STRUCTS]
    refs, components = msgspec.json.schema_components(everything, ref_template=_REF)
    ref = dict(zip(everything, refs, strict=True))
    _fill_served(components, served)
    _cross_field_rules(components)
    responses_rules(components, store=served.responses_store)
    _completion_prompt_rule(components["CompletionRequest"], served.prompt_embeds)
    _content_parts_rule(components, served.prompt_embeds)
    if not served.trust_request_chat_template:
        for name in ("ChatCompletionRequest", "TokenizeRequest", _BATCH, "EmbeddingRequest",
                     "PoolingRequest", "ClassificationRequest"):  # fmt: skip
            components[name]["properties"]["chat_template"] = {
                "type": "null",
                "description": "Refused: the server was not started with "
                "--trust-request-chat-template.",
            }
    if served.pooling_tasks:
        _served_pooling(components, served)
    if not served.has_chat_template and not served.trust_request_chat_template:
        for name in ("EmbeddingRequest", "PoolingRequest", "ClassificationRequest"):
            components[name]["properties"]["messages"] = {
                "not": {},
                "description": "Refused: the tokenizer has no chat template.",
            }
            components[name]["oneOf"] = [{"required": ["input"]}]
    error = {"description": "Error", **_json(ref[p.ErrorResponse])}
    paths: dict[str, dict[str, Any]] = {}
    pooling = bool(served.pooling_tasks)
    endpoints = [e for e in _ENDPOINTS if not (pooling and e[1] in _GENERATION_PATHS)]
    endpoints += [
        ("post", path, req, resp, summary, "pooling")
        for path, req, resp, summary, needs in _POOLING_ENDPOINTS
        if _pooling_served(needs, served)
    ]
    for method, path, req, resp, summary, tag in endpoints:
        op: dict[str, Any] = {"summary": summary, "tags": [tag], "responses": {}}
        if tag == "pooling":
            scoring = req is pp.ScoreRequest or req is pp.RerankRequest
            op["description"] = summary + (_SCORE_RULES if scoring else _POOLING_RULES)
        ok: dict[str, Any] = {"description": "OK"}
        if resp is not None:
            ok.update(_json(ref[resp]))
        if path == "/metrics":
            ok["content"] = {"text/plain": {"schema": {"type": "string"}}}
        if path == "/v1/chat/completions/batch":
            op["description"] = summary + _GENERATION_RULES + " Each conversation alone."
        if path in ("/v1/completions", "/v1/chat/completions"):
            chunk = ref[
                p.CompletionResponse if req is p.CompletionRequest else p.ChatCompletionChunk
            ]
            ok["content"]["text/event-stream"] = {"schema": _event(chunk, ref[p.ErrorResponse])}
            op["description"] = summary + _GENERATION_RULES
        op["responses"]["200"] = ok
        statuses = [500, 503]
        if req is not None:
            op["requestBody"] = {"required": True, **_json(ref[req])}
            statuses += [400, 404, 413]
        if is_guarded(path) and api_key:
            statuses.append(401)
            op["security"] = [{"bearer": []}]
        _responses(op, error, sorted(statuses))
        paths.setdefault(path, {})[method] = op
    if not pooling:  # a pooling model serves none of the generation routes
        paths["/invocations"] = {"post": _invocations(ref, error, api_key)}
        for path, ops in responses_paths(ref, api_key).items():
            for method, (op, statuses) in ops.items():
                _responses(op, error, statuses)
                paths.setdefault(path, {})[method] = op
    if dev_mode:
        rpc = (dev_rpc.CollectiveRPCRequest, dev_rpc.CollectiveRPCResponse)
        (rpc_body, rpc_result), rpc_schemas = msgspec.json.schema_components(rpc, ref_template=_REF)
        components.update(rpc_schemas)
        for method, path, summary in _DEV_ENDPOINTS:
            op = {"summary": summary, "tags": ["dev"], "responses": {"200": {"description": "OK"}}}
            if path == "/collective_rpc":
                op["requestBody"] = {"required": True, **_json(rpc_body)}
                op["responses"]["200"].update(_json(rpc_result))
            _responses(op, error, [400, 409, 500, 503] if method == "post" else [500, 503])
            paths.setdefault(path, {})[method] = op
    if served.runtime_lora:
        _lora_paths(paths, components, error, api_key)
    if served.tokenizer_info:
        info = {"description": "OK", **_json({"type": "object"})}
        op = {"summary": "The tokenizer's class, settings and chat template.", "tags": ["tokens"]}
        op["responses"] = {"200": info}
        _responses(op, error, [500, 503])
        paths["/tokenizer_info"] = {"get": op}
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "actorllm OpenAI-compatible API", "version": __version__},
        "paths": paths,
        "components": {"schemas": components},
    }
    if api_key:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    return doc
