"""Cohere's ``POST /v2/embed``, as vLLM 0.32 serves it: ``texts`` (or ``inputs`` of content
parts; ``images`` need a vision model), ``input_type`` (a task prefix the model defines),
``embedding_types``, ``truncate``, ``max_tokens``, ``output_dimension``; the answer holds one
list per embedding type."""

from __future__ import annotations

import builtins
from typing import Annotated, Literal

import msgspec

from actorllm.entrypoints.openai.protocol.pooling import Dimensions, Priority

EmbeddingType = Literal["float", "binary", "ubinary", "base64"]


class CohereEmbedContent(msgspec.Struct, kw_only=True):
    type: Literal["text", "image_url"]
    text: str | None = None
    image_url: dict[str, str] | None = None


class CohereEmbedInput(msgspec.Struct, kw_only=True):
    content: list[CohereEmbedContent]


class CohereEmbedRequest(msgspec.Struct, kw_only=True):
    """Exactly one of ``texts``, ``images`` and ``inputs``, non-empty."""

    model: str | None = None
    input_type: str | None = None
    texts: list[str] | None = None
    images: list[str] | None = None
    inputs: list[CohereEmbedInput] | None = None
    output_dimension: Dimensions | None = None
    embedding_types: list[EmbeddingType] | None = None  # None: ["float"]
    # NONE: an input longer than the context (or max_tokens) is refused; START / END cut
    # tokens from that end
    truncate: Literal["NONE", "START", "END"] = "END"
    max_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    priority: Priority = 0


class CohereApiVersion(msgspec.Struct, kw_only=True):
    version: str = "2"


class CohereBilledUnits(msgspec.Struct, kw_only=True):
    input_tokens: int
    image_tokens: int = 0


class CohereMeta(msgspec.Struct, kw_only=True):
    api_version: CohereApiVersion = msgspec.field(default_factory=CohereApiVersion)
    billed_units: CohereBilledUnits | None = None


class CohereEmbeddings(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One list per requested type (the others left out)."""

    # (``float`` names the field here, so the type is spelt builtins.float)
    float: list[list[builtins.float]] | None = None
    binary: list[list[int]] | None = None
    ubinary: list[list[int]] | None = None
    base64: list[str] | None = None


class CohereEmbedResponse(msgspec.Struct, kw_only=True, omit_defaults=True):
    """(Fields left None are left out, as vLLM's ``exclude_none``.)"""

    id: str
    embeddings: CohereEmbeddings
    response_type: Literal["embeddings_by_type"]  # (no default: always sent)
    meta: CohereMeta
    texts: list[str] | None = None
