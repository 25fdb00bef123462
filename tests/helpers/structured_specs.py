"""A corpus of constraints for structured-outputs tests and benchmarks: 20+ JSON schemas
(nested objects, enums, bounded arrays, number ranges, patterns, anyOf, $ref/$defs),
regexes, choices and a small EBNF grammar, each bounded so a random-weight model reaches
the end within a few dozen tokens, with a checker that says whether an output is valid."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema

from actorllm.core.structured_outputs_params import StructuredOutputsParams as SOP

_S = {"type": "string", "maxLength": 5}


def _obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": list(props) if required is None else required,
        "additionalProperties": False,
    }


SCHEMAS: list[dict[str, Any]] = [
    _obj({"name": _S}),
    _obj({"age": {"type": "integer", "minimum": 0, "maximum": 120}}),
    _obj({"ok": {"type": "boolean"}, "n": {"type": "null"}}),
    _obj({"color": {"enum": ["red", "green", "blue"]}}),
    _obj({"level": {"const": "high"}}),
    _obj({"score": {"type": "integer", "minimum": -50, "maximum": 50}}),
    _obj({"ratio": {"type": "number", "minimum": 0, "maximum": 1}}),
    _obj({"tags": {"type": "array", "items": _S, "minItems": 1, "maxItems": 3}}),
    _obj(
        {
            "xs": {
                "type": "array",
                "items": {"type": "integer", "minimum": 0, "maximum": 9},
                "maxItems": 4,
            }
        }
    ),
    _obj({"user": _obj({"id": {"type": "integer", "minimum": 1, "maximum": 99}, "nick": _S})}),
    _obj({"a": _obj({"b": _obj({"c": {"enum": [1, 2, 3]}})})}),
    _obj({"code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{2}$"}}),
    _obj({"zip": {"type": "string", "pattern": "^[0-9]{5}$"}, "city": _S}),
    _obj({"v": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"enum": ["x", "y"]}]}}),
    _obj({"pet": {"anyOf": [_obj({"cat": _S}), _obj({"dog": {"type": "boolean"}})]}}),
    {
        "$defs": {
            "point": _obj(
                {
                    "x": {"type": "integer", "minimum": 0, "maximum": 9},
                    "y": {"type": "integer", "minimum": 0, "maximum": 9},
                }
            )
        },
        **_obj({"p": {"$ref": "#/$defs/point"}, "q": {"$ref": "#/$defs/point"}}),
    },
    {
        "$defs": {"item": _obj({"sku": {"type": "string", "pattern": "^[a-z]{3}$"}})},
        **_obj({"items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "maxItems": 2}}),
    },
    _obj({"opt": _S, "req": {"type": "integer", "minimum": 0, "maximum": 5}}, required=["req"]),
    _obj(
        {
            "matrix": {
                "type": "array",
                "maxItems": 2,
                "items": {"type": "array", "items": {"enum": [0, 1]}, "maxItems": 2},
            }
        }
    ),
    _obj({"status": {"enum": ["active", "inactive", None]}}),
    {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 3},
    {"enum": ["small", "medium", "large"]},
    _obj(
        {
            "when": {"type": "string", "pattern": "^20[0-9]{2}-0[1-9]$"},
            "qty": {"type": "integer", "minimum": 1, "maximum": 10},
        }
    ),
]

REGEXES = [r"[A-Z][a-z]{1,6} [0-9]{2}", r"(yes|no|maybe)!", r"[0-9]{3}-[0-9]{4}", r"[a-f0-9]{8}"]
CHOICES = [["north", "south", "east", "west"], ["true", "false"]]
GRAMMAR = 'root ::= "(" num (op num){0,3} ")"\nop ::= "+" | "*"\nnum ::= [0-9]{1,3}'
GRAMMAR_RE = r"\([0-9]{1,3}([+*][0-9]{1,3}){0,3}\)"


def all_specs() -> list[SOP]:
    specs = [SOP(json=s, disable_any_whitespace=True) for s in SCHEMAS]
    specs += [SOP(regex=r) for r in REGEXES]
    specs += [SOP(choice=c) for c in CHOICES]
    specs.append(SOP(grammar=GRAMMAR))
    return specs


def is_valid(spec: SOP, text: str) -> bool:
    """Whether ``text`` satisfies ``spec`` (jsonschema for schemas)."""
    if spec.json is not None:
        try:
            jsonschema.validate(json.loads(text), spec.schema)  # type: ignore[arg-type]
        except (ValueError, jsonschema.ValidationError):
            return False
        return True
    if spec.regex is not None:
        return re.fullmatch(spec.regex, text) is not None
    if spec.choice is not None:
        return text in spec.choice
    return re.fullmatch(GRAMMAR_RE, text) is not None
