"""Structured outputs as the request asks for them: OpenAI's ``response_format`` and vLLM's
``structured_outputs`` (``structured_request.py`` turns either into one constraint)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec


class JsonSchemaFormat(msgspec.Struct, kw_only=True):
    name: str = "response"
    description: str | None = None
    schema: dict[str, Any]
    strict: bool | None = None


class TextFormat(msgspec.Struct, kw_only=True, tag_field="type", tag="text"):
    pass


class JsonObjectFormat(msgspec.Struct, kw_only=True, tag_field="type", tag="json_object"):
    pass


class JsonSchemaResponseFormat(msgspec.Struct, kw_only=True, tag_field="type", tag="json_schema"):
    json_schema: JsonSchemaFormat


class StructuralTagResponseFormat(
    msgspec.Struct, kw_only=True, tag_field="type", tag="structural_tag", omit_defaults=True
):
    """vLLM's structural tag: ``structures`` (begin, JSON schema, end) entered after one of
    the ``triggers``; or xgrammar's newer ``format`` object."""

    structures: list[dict[str, Any]] | None = None
    triggers: list[str] | None = None
    format: dict[str, Any] | None = None


ResponseFormat = (
    TextFormat | JsonObjectFormat | JsonSchemaResponseFormat | StructuralTagResponseFormat
)


class StructuredOutputsField(
    msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True
):
    """vLLM's ``structured_outputs`` body field: one constraint plus options (an unknown
    key is a 400 naming it, never dropped)."""

    json: dict[str, Any] | str | None = None
    json_object: bool | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    structural_tag: str | None = None
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: str | None = None
    disable_fallback: bool = False
    backend: Literal["auto", "xgrammar", "guidance"] | None = None
