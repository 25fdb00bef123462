"""Qwen3-Coder (and Qwen3 templates that use it): XML-ish calls with raw parameter values::

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    <parameter=days>
    3
    </parameter>
    </function>
    </tool_call>

Values are text; each is converted with the type the request's tool declares for that
parameter (integer, number, boolean, object/array as JSON; strings as they are; undeclared
ones as JSON when they parse, else text). While streaming, ``arguments`` grows one complete
parameter at a time (``{"city": "Paris"``, then ``, "days": 3``, then ``}``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from actorllm.entrypoints.openai.tool_parsers.base import Parsed, PartialCall, ToolParser

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_FUNCTION = re.compile(r"<function=([^>\n]+)>")
_PARAM = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.S)
_END_FUNCTION = "</function>"


class Qwen3XmlToolParser(ToolParser):
    markers = (OPEN, "<function=")

    def parse(self, text: str, final: bool) -> Parsed:
        starts = [i for i in (text.find(OPEN), text.find("<function=")) if i >= 0]
        if not starts:
            return Parsed(content=text)
        first = min(starts)
        parsed = Parsed(content=text[:first])
        for m in _FUNCTION.finditer(text, first):
            name = m.group(1).strip()
            close = text.find(_END_FUNCTION, m.end())
            body = text[m.end() : close if close >= 0 else len(text)]
            schema = self.parameter_schema(name).get("properties") or {}
            items = []
            for p in _PARAM.finditer(body):
                key = p.group(1).strip()
                value = _convert(p.group(2), schema.get(key))
                items.append(f"{json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}")
            args = "{" + ", ".join(items)
            if close >= 0:
                parsed.calls.append(PartialCall(name=name, arguments=args + "}", complete=True))
            else:
                if final:
                    return Parsed(content=text) if not parsed.calls else parsed
                parsed.calls.append(PartialCall(name=name, arguments=args))
                break
        if final and not parsed.calls:
            return Parsed(content=text)
        return parsed


def _convert(raw: str, schema: Any) -> Any:
    kind = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    value = raw
    if kind == "string":
        return value
    if value.strip().lower() == "null":
        return None
    if kind == "integer":
        try:
            return int(value.strip())
        except ValueError:
            return value
    if kind == "number":
        try:
            f = float(value.strip())
        except ValueError:
            return value
        return int(f) if f.is_integer() and "." not in value else f
    if kind == "boolean":
        lowered = value.strip().lower()
        return lowered == "true" if lowered in ("true", "false") else value
    try:
        return json.loads(value)
    except ValueError:
        return value
