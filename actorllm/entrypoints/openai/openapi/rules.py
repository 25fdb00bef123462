"""The rules between fields that JSON Schema can state, added to the generated request
schemas (the ones it cannot are written in each operation's description, endpoints.py)."""

from __future__ import annotations

from typing import Any

from actorllm.entrypoints.openai.fields import UNSUPPORTED
from actorllm.entrypoints.openai.openapi.prompt import prompt_forms
from actorllm.entrypoints.openai.preprocess import reserved_template_kwargs
from actorllm.entrypoints.openai.protocol import pooling as pp

BATCH = "BatchChatCompletionRequest"


def _if_set(field: str, value: Any = None) -> dict[str, Any]:
    cond: dict[str, Any] = {"required": [field]}
    cond["properties"] = {
        field: {"const": value} if value is not None else {"not": {"type": "null"}}
    }
    return cond


def cross_field_rules(components: dict[str, Any]) -> None:
    """Rules between fields that JSON Schema can state, added to the generated schemas."""
    components["CompletionRequest"]["properties"]["prompt"] = prompt_forms(components)
    not_both = {  # continue_final_message needs add_generation_prompt: false
        "if": _if_set("continue_final_message", True),
        "then": _if_set("add_generation_prompt", False),
    }
    reserved = {"propertyNames": {"not": {"enum": sorted(reserved_template_kwargs())}}}
    for name in ("ChatCompletionRequest", "TokenizeRequest", BATCH):
        schema = components[name]
        schema.setdefault("allOf", []).append(not_both)
    for name in ("ChatCompletionRequest", "TokenizeRequest", "ResponsesRequest", BATCH):
        kwargs = components[name]["properties"]["chat_template_kwargs"]
        kwargs["anyOf"][0].update(reserved)
    asks_top = _if_set("top_logprobs")
    asks_top["properties"]["top_logprobs"] = {"not": {"enum": [None, 0]}}  # 0 asks nothing
    for name in ("ChatCompletionRequest", BATCH):  # top_logprobs needs logprobs
        components[name]["allOf"].append({"if": asks_top, "then": _if_set("logprobs", True)})
    batch = components[BATCH]["properties"]  # vLLM's batch limits
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
        BATCH,
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
    for name in ("CompletionRequest", "ChatCompletionRequest", BATCH):
        truncate = components[name]["properties"]["truncate_prompt_tokens"]["anyOf"][0]
        truncate["not"] = {"const": 0}  # -1 or at least 1
        components[name].setdefault("allOf", []).append(options_need_stream)
    # kv_transfer_params: the prefill's prompt ids only (entrypoints/openai/kv_transfer.py;
    # the batch takes none)
    ids = {"type": "array", "minItems": 1,
           "items": {"type": "integer", "minimum": 0, "x-served": "token"}}  # fmt: skip
    for name, forwarded_ids in (("ChatCompletionRequest", ids), (BATCH, None)):
        allowed = [{"type": "null"}] if forwarded_ids is None else [forwarded_ids, {"type": "null"}]
        forwarded = {"type": "object", "properties": {"prompt_token_ids": {"anyOf": allowed}},
                     "additionalProperties": False}  # fmt: skip
        props = components[name]["properties"]
        if "kv_transfer_params" in props:
            props["kv_transfer_params"] = {"anyOf": [forwarded, {"type": "null"}], "default": None}
    _pooling_rules(components, reserved)


def _pooling_rules(components: dict[str, Any], reserved: dict[str, Any]) -> None:
    """The pooling requests' rules between fields (see cross_field_rules)."""
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
    components["ScoreRequest"]["oneOf"] = [{"required": list(pair)} for pair in pp.SCORE_PAIRS]
    _cohere_rules(components)


def _cohere_rules(components: dict[str, Any]) -> None:
    """/v2/embed: exactly one of ``texts`` and ``inputs``, non-empty; no images (a text
    model; ``images`` and image parts are a 400)."""
    props = components["CohereEmbedRequest"]["properties"]
    props["images"] = {"type": "null", "description": "Refused: this server serves text models."}
    for field in ("texts", "inputs"):
        props[field]["anyOf"][0]["minItems"] = 1
    props["texts"]["anyOf"][0]["items"]["minLength"] = 1  # (as /v1/embeddings' input)
    components["CohereEmbedRequest"]["oneOf"] = [
        {"required": [field], "properties": {field: {"type": "array"}}}
        for field in ("texts", "inputs")
    ]
    components["CohereEmbedContent"]["properties"]["type"] = {"enum": ["text"]}
    components["CohereEmbedContent"]["required"] = ["type", "text"]
    components["CohereEmbedContent"]["properties"]["text"] = {"type": "string"}
    components["CohereEmbedContent"]["properties"]["image_url"] = {"type": "null"}
