"""The whole document: the component schemas generated from the protocol structs, the
served model's bounds and the rules added to them, and the paths."""

from __future__ import annotations

from typing import Any

import msgspec

from actorllm import __version__
from actorllm.entrypoints.anthropic.openapi import ANTHROPIC_STRUCTS, anthropic_rules
from actorllm.entrypoints.cohere.openapi import COHERE_STRUCTS
from actorllm.entrypoints.generative_scoring.openapi import generative_scoring_rule
from actorllm.entrypoints.openai import protocol as p
from actorllm.entrypoints.openai.openapi.endpoints import ENDPOINTS, POOLING_ENDPOINTS
from actorllm.entrypoints.openai.openapi.parts import REF
from actorllm.entrypoints.openai.openapi.paths import document_paths
from actorllm.entrypoints.openai.openapi.prompt import completion_prompt_rule, content_parts_rule
from actorllm.entrypoints.openai.openapi.rules import cross_field_rules
from actorllm.entrypoints.openai.openapi.served import Served, fill_served, restrict_to_served
from actorllm.entrypoints.openai.responses.openapi import RESPONSES_STRUCTS, responses_rules
from actorllm.entrypoints.scale_out.openapi import SCALE_OUT_STRUCTS


def openapi_document(*, dev_mode: bool, api_key: bool, served: Served) -> dict[str, Any]:
    """The OpenAPI 3.1 document of this server: ``dev_mode`` adds the dev routes,
    ``api_key`` (one is set) the bearer scheme and 401s on the guarded routes."""
    structs = [t for _, _, req, resp, _, _ in ENDPOINTS for t in (req, resp) if t is not None]
    structs += [t for _, req, resp, _, _ in POOLING_ENDPOINTS for t in (req, resp)]
    structs = list(dict.fromkeys(structs))
    everything = [*structs, p.ChatCompletionChunk, p.ErrorResponse, *RESPONSES_STRUCTS]
    everything += ANTHROPIC_STRUCTS
    everything += COHERE_STRUCTS if served.cohere_api else []
    everything += SCALE_OUT_STRUCTS if served.scale_out else []
    refs, components = msgspec.json.schema_components(everything, ref_template=REF)
    ref = dict(zip(everything, refs, strict=True))
    fill_served(components, served)
    cross_field_rules(components)
    fill_served(components, served)  # (the bounds the rules add)
    responses_rules(components, store=served.responses_store, harmony=served.harmony)
    anthropic_rules(components)
    generative_scoring_rule(components, served)
    completion_prompt_rule(components["CompletionRequest"], served.prompt_embeds)
    content_parts_rule(components, served.prompt_embeds)
    restrict_to_served(components, served)
    paths = document_paths(ref, components, dev_mode=dev_mode, api_key=api_key, served=served)
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "actorllm OpenAI-compatible API", "version": __version__},
        "paths": paths,
        "components": {"schemas": components},
    }
    if api_key:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    return doc
