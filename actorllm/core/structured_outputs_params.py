"""What a request's output must match: a JSON schema, a regex, a choice, a grammar, a tag.

Field names and meanings follow vLLM's ``StructuredOutputsParams``. Exactly one constraint
is set (``json``, ``json_object``, ``regex``, ``choice``, ``grammar`` or
``structural_tag``); the rest are options. Shape errors (no constraint, two constraints,
an empty choice list, a schema that is not JSON) raise :class:`StructuredOutputsError` when
the struct is built, so they are a 400 before anything compiles. Whether the schema or
grammar *compiles* is checked later, by the backend, still before scheduling.

    >>> StructuredOutputsParams(choice=["yes", "no"]).kind
    'choice'
    >>> StructuredOutputsParams(regex="a+", choice=["a"])
    Traceback (most recent call last):
    ...
    actorllm.core.structured_outputs_params.StructuredOutputsError: structured_outputs \
must set exactly one of json, json_object, regex, choice, grammar, structural_tag; got \
regex, choice.

The :attr:`key` is what the grammar cache is keyed by: the kind, the spec text (schemas
re-serialized compactly, key order kept: it is the order properties are generated in) and
the options that change the compiled grammar.
"""

from __future__ import annotations

import json as _json
from typing import Any, Literal

import msgspec

from actorllm.core.errors import InvalidRequestError

BackendChoice = Literal["auto", "xgrammar", "guidance"]
BACKEND_CHOICES: tuple[BackendChoice, ...] = ("auto", "xgrammar", "guidance")
ConstraintKind = Literal["json", "json_object", "regex", "choice", "grammar", "structural_tag"]
_CONSTRAINTS: tuple[ConstraintKind, ...] = (
    "json",
    "json_object",
    "regex",
    "choice",
    "grammar",
    "structural_tag",
)


class StructuredOutputsError(InvalidRequestError):
    """An unusable structured-outputs spec (HTTP 400). ``param`` names the field at fault,
    ``structured_outputs.<field>`` (``structured_outputs`` when no one field is); the
    message starts with it. The server renames it to the field the client sent
    (``guided_regex``, ``response_format``...) with :meth:`renamed`."""

    def __init__(self, message: str, *, param: str = "structured_outputs") -> None:
        super().__init__(f"{param} {message}", param=param)
        self.detail = message  # the message without the field name

    def renamed(self, param: str) -> StructuredOutputsError:
        """The same error, naming ``param`` instead."""
        return StructuredOutputsError(self.detail, param=param)


def _field_error(field: str, message: str) -> StructuredOutputsError:
    return StructuredOutputsError(message, param=f"structured_outputs.{field}")


class GrammarKey(msgspec.Struct, frozen=True, kw_only=True):
    """Everything that determines a compiled grammar (hashable: the cache key)."""

    kind: ConstraintKind
    spec: str  # canonical text: sorted-key JSON for schemas, the choices as a JSON list
    any_whitespace: bool = True
    whitespace_pattern: str | None = None
    disable_additional_properties: bool = False

    @property
    def param(self) -> str:
        """The field a compile error names (``structured_outputs.regex``...)."""
        return f"structured_outputs.{self.kind}"


class StructuredOutputsParams(msgspec.Struct, kw_only=True):
    """One output constraint plus options (vLLM's names)."""

    json: dict[str, Any] | str | None = None  # a JSON schema (dict, or its JSON text)
    json_object: bool | None = None  # any JSON object
    regex: str | None = None
    choice: list[str] | None = None  # one of these strings, exactly
    grammar: str | None = None  # EBNF / GBNF (or Lark, auto-detected)
    structural_tag: str | None = None  # xgrammar structural tag, as JSON text
    # Options.
    disable_any_whitespace: bool = False  # JSON without optional whitespace
    disable_additional_properties: bool = False  # objects allow only the listed properties
    whitespace_pattern: str | None = None  # regex for JSON whitespace (llguidance only)
    # With backend auto: xgrammar alone, an error rather than a fallback to llguidance.
    disable_fallback: bool = False
    # This request's backend, overriding the engine's (the older ``guided_decoding_backend``);
    # None: the engine's ``structured_outputs_config.backend``.
    backend: BackendChoice | None = None

    def __post_init__(self) -> None:
        # Types first: a struct built from a request body is not type-checked, and a
        # string where a list belongs (``choice: "abc"``) would quietly mean a, b or c.
        for name in (
            "json_object",
            "disable_any_whitespace",
            "disable_additional_properties",
            "disable_fallback",
        ):
            if not isinstance(getattr(self, name), bool | None):
                raise _field_error(name, "must be a boolean.")
        if self.whitespace_pattern is not None and not isinstance(self.whitespace_pattern, str):
            raise _field_error("whitespace_pattern", "must be a string.")
        if self.json is not None and not isinstance(self.json, dict | str):
            raise _field_error("json", "must be a JSON schema (an object, or its JSON text).")
        if self.choice is not None and not isinstance(self.choice, list):
            raise _field_error("choice", "must be a list of strings.")
        if self.backend is not None and self.backend not in BACKEND_CHOICES:
            raise _field_error(
                "backend", f"must be one of {', '.join(BACKEND_CHOICES)}, got {self.backend!r}."
            )
        set_ = [c for c in _CONSTRAINTS if getattr(self, c) is not None]
        if self.json_object is False:
            set_.remove("json_object")  # json_object=False is "not set", as in vLLM's API
        if len(set_) != 1:
            got = ", ".join(set_) if set_ else "none"
            raise StructuredOutputsError(
                "must set exactly one of json, json_object, regex, choice, grammar, "
                f"structural_tag; got {got}."
            )
        if self.choice is not None:
            if not self.choice:
                raise _field_error("choice", "must not be empty.")
            if not all(isinstance(c, str) for c in self.choice):
                raise _field_error("choice", "must be a list of strings.")
        if isinstance(self.json, str):
            try:
                parsed = _json.loads(self.json)
            except ValueError as exc:
                raise _field_error("json", f"is not valid JSON: {exc}.") from exc
            if not isinstance(parsed, dict | bool):
                raise _field_error("json", "must be a JSON schema (an object).")
        for name in ("regex", "grammar", "structural_tag"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise _field_error(name, "must be a non-empty string.")
        if self.regex is not None and "\x00" in self.regex:
            raise _field_error("regex", "must not contain a NUL character.")
        if self.structural_tag is not None:
            try:
                tag = _json.loads(self.structural_tag)
            except ValueError as exc:
                raise _field_error("structural_tag", f"is not valid JSON: {exc}.") from exc
            if not isinstance(tag, dict):
                raise _field_error("structural_tag", "must be a JSON object.")

    @property
    def kind(self) -> ConstraintKind:
        for c in _CONSTRAINTS:
            if getattr(self, c) is not None and not (c == "json_object" and not self.json_object):
                return c
        raise AssertionError("validated in __post_init__")

    @property
    def schema(self) -> dict[str, Any] | None:
        """The JSON schema as a dict (``json`` kinds), else None."""
        if self.json is None:
            return {"type": "object"} if self.kind == "json_object" else None
        return _json.loads(self.json) if isinstance(self.json, str) else self.json

    @property
    def key(self) -> GrammarKey:
        kind = self.kind
        spec: str
        if kind == "json":
            # Key order kept: properties are generated in the schema's order.
            spec = _json.dumps(self.schema, separators=(",", ":"))
        elif kind == "json_object":
            spec = '{"type":"object"}'
        elif kind == "choice":
            spec = _json.dumps(self.choice)
        else:
            value = getattr(self, kind)
            assert isinstance(value, str)
            spec = value
        return GrammarKey(
            kind=kind,
            spec=spec,
            any_whitespace=not self.disable_any_whitespace,
            whitespace_pattern=self.whitespace_pattern,
            disable_additional_properties=self.disable_additional_properties,
        )
