"""A function's JSON-schema parameters as the TypeScript-like type harmony prompts show
(``openai_harmony``'s rendering: descriptions as ``//`` comments above each field,
optional fields marked ``?``, defaults as trailing comments, enums as unions).

    >>> print(schema_to_typescript({"type": "object", "properties": {
    ...     "location": {"type": "string", "description": "The city"},
    ...     "unit": {"type": "string", "enum": ["c", "f"], "default": "c"}},
    ...     "required": ["location"]}))
    {
    // The city
    location: string,
    unit?: "c" | "f", // default: c
    }
"""

from __future__ import annotations

import json
from typing import Any


def schema_to_typescript(schema: Any, indent: str = "") -> str:
    if not isinstance(schema, dict):
        return "any"
    one_of = schema.get("oneOf")
    if isinstance(one_of, list):
        return "".join(
            f"\n{indent} | " + _variant(v, f"{indent}   ", describe=True) for v in one_of
        )
    kind = schema.get("type")
    if isinstance(kind, list):
        names = ["number" if t == "integer" else t for t in kind if isinstance(t, str)]
        if names:
            return " | ".join(names)
    if not isinstance(kind, str):
        return "any"
    if kind == "object":
        return _object(schema, indent)
    if kind == "string":
        enum = [f'"{v}"' for v in schema.get("enum") or [] if isinstance(v, str)]
        return " | ".join(enum) if enum else "string"
    if kind in ("number", "integer"):
        return "number"
    if kind == "boolean":
        return "boolean"
    if kind == "array":
        items = schema.get("items")
        return f"{schema_to_typescript(items, indent)}[]" if items is not None else "Array<any>"
    return "any"


def _object(schema: dict[str, Any], indent: str) -> str:
    out = ""
    desc = schema.get("description")
    if isinstance(desc, str):
        out += f"{indent}// {desc}\n"
    out += "{\n"
    props = schema.get("properties")
    required = {r for r in schema.get("required") or [] if isinstance(r, str)}
    for key, val in props.items() if isinstance(props, dict) else []:
        val = val if isinstance(val, dict) else {}
        mark = "" if key in required else "?"
        title = val.get("title")
        if isinstance(title, str):
            out += f"{indent}// {title}\n{indent}//\n"
        one_of = val.get("oneOf")
        vdesc = val.get("description")
        if not isinstance(one_of, list) and isinstance(vdesc, str):
            out += f"{indent}// {vdesc}\n"
        examples = val.get("examples")
        if isinstance(examples, list) and examples:
            out += f"{indent}// Examples:\n"
            out += "".join(f'{indent}// - "{ex}"\n' for ex in examples if isinstance(ex, str))
        if isinstance(one_of, list):
            out += _one_of_property(key, mark, val, one_of, indent)
            continue
        out += f"{indent}{key}{mark}: " + _nullable(val, schema_to_typescript(val, f"{indent}    "))
        out += ","
        if "default" in val:
            out += f" // {_default(val)}"
        out += "\n"
    return out + f"{indent}}}"


def _one_of_property(
    key: str, mark: str, val: dict[str, Any], variants: list[Any], indent: str
) -> str:
    """A property whose schema is a ``oneOf``: its description above it (unless the first
    variant repeats it), then one ``| type`` line per variant."""
    desc = val.get("description") if isinstance(val.get("description"), str) else None
    first = variants[0] if variants and isinstance(variants[0], dict) else {}
    above = desc is not None and first.get("description") != desc
    out = f"{indent}// {desc}\n" if above else ""
    if "default" in val:
        out += f"{indent}// {_default(val)}\n"
    out += f"{indent}{key}{mark}:\n"
    for i, variant in enumerate(variants):
        v = variant if isinstance(variant, dict) else {}
        line = f"{indent} | " + _nullable(v, schema_to_typescript(v, f"{indent}   "))
        comments = []
        vdesc = v.get("description")
        if not (i == 0 and above) and isinstance(vdesc, str) and vdesc != desc:
            comments.append(vdesc)
        if "default" in v:
            comments.append(_default(v))
        if comments:
            line += " // " + " ".join(comments)
        out += line + "\n"
    return out + f"{indent},\n"


def _variant(v: Any, indent: str, *, describe: bool) -> str:
    v = v if isinstance(v, dict) else {}
    text = _nullable(v, schema_to_typescript(v, indent))
    comments = []
    if describe and isinstance(v.get("description"), str):
        comments.append(v["description"])
    if "default" in v:
        comments.append(_default(v))
    return text + (" // " + " ".join(comments) if comments else "")


def _nullable(schema: dict[str, Any], text: str) -> str:
    if schema.get("nullable") is True and "null" not in text:
        return f"{text} | null"
    return text


def _is_enum(schema: dict[str, Any]) -> bool:
    enum = schema.get("enum")
    return isinstance(enum, list) and bool(enum)


def _default(schema: dict[str, Any]) -> str:
    """``default: ...``: a string in quotes, an enum's string bare, anything else as
    compact JSON."""
    d = schema["default"]
    if isinstance(d, str):
        return f'default: "{d}"' if not _is_enum(schema) else f"default: {d}"
    return "default: " + json.dumps(d, separators=(",", ":"), ensure_ascii=False)
