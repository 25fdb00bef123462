"""Tool calls the request forces (``tool_choice`` = a named function, or ``required``).

These are not parsed from a model family's format: structured outputs make the model write
exactly the JSON we asked for (``tool_choice_schema``), so the arguments always validate
against the function's parameters.

* named: the output *is* the arguments object of that function;
* required: the output is a JSON array of ``{"name": ..., "parameters": {...}}``, at least
  one item, each item's parameters validated by its own function's schema.
"""

from __future__ import annotations

import json
from typing import Any

from actorllm.core.errors import InvalidRequestError
from actorllm.entrypoints.openai.tool_parsers.base import Parsed, PartialCall, ToolParser
from actorllm.entrypoints.openai.tool_parsers.json_calls import call_array
from actorllm.entrypoints.openai.tool_parsers.json_scan import loads_object, scan_value


def tool_choice_schema(tools: list[dict[str, Any]], tool_choice: Any) -> dict[str, Any] | None:
    """The JSON schema that forces ``tool_choice``'s calls, or None for none/auto."""
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name")
        for tool in tools:
            fn = tool.get("function") or {}
            if fn.get("name") == name:
                return _parameters(fn)
        raise KeyError(name)
    if tool_choice != "required":
        return None
    functions = [t.get("function") or {} for t in tools]
    defs = _shared_defs(functions)
    items = [
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "enum": [fn["name"]]},
                "parameters": {k: v for k, v in _parameters(fn).items() if k != "$defs"},
            },
            "required": ["name", "parameters"],
            "additionalProperties": False,
        }
        for fn in functions
    ]
    schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"anyOf": items}}
    if defs:
        schema["$defs"] = defs
    return schema


def _shared_defs(functions: list[dict[str, Any]]) -> dict[str, Any]:
    """Every function's ``$defs``, for the root of the required schema: its ``$ref``s
    ("#/$defs/X") point at the root, where a function's own parameters no longer are
    (vLLM's ``_get_tool_schema_defs``, its 400s)."""
    found: dict[str, Any] = {}
    for fn in functions:
        defs = _parameters(fn).get("$defs", {})
        if not isinstance(defs, dict):
            raise InvalidRequestError(
                f"`$defs` in the parameters of tool '{fn.get('name')}' must be an object, "
                f"got {type(defs).__name__}.",
                param="tools",
            )
        for name, schema in defs.items():
            if name in found and found[name] != schema:
                raise InvalidRequestError(
                    f"Tool definition '{name}' has multiple schemas, which is not supported.",
                    param="tools",
                )
            found[name] = schema
    return found


def strict_tools_tag(parser: ToolParser, tools: list[dict[str, Any]]) -> str | None:
    """The structural tag (xgrammar's ``{structures, triggers}``, as JSON) that holds the
    calls of a tool_choice auto answer to their functions' parameters when some function
    is ``"strict": true`` (OpenAI's strict function calling; vLLM does the same). The
    model may still answer in text; once it starts a call, the call must be one of the
    tools with valid arguments (a tool that is not strict: any JSON object). None: no
    strict tool. Raises ``ValueError`` if ``parser``'s format cannot be forced."""
    functions = [t.get("function") or {} for t in tools]
    if not any(fn.get("strict") is True for fn in functions):
        return None
    structures, triggers = [], []
    for fn in functions:
        tag = parser.strict_call_tag(str(fn.get("name")))
        if tag is None:
            raise ValueError(type(parser).__name__)
        trigger, begin, end = tag
        schema = _parameters(fn) if fn.get("strict") is True else {"type": "object"}
        structures.append({"begin": begin, "schema": schema, "end": end})
        if trigger not in triggers:
            triggers.append(trigger)
    return json.dumps({"structures": structures, "triggers": triggers})


def _parameters(fn: dict[str, Any]) -> dict[str, Any]:
    params = fn.get("parameters")
    return params if isinstance(params, dict) and params else {"type": "object"}


class NamedToolParser(ToolParser):
    """The output is the arguments of ``name``."""

    def __init__(self, name: str, tokenizer: Any = None) -> None:
        super().__init__(tokenizer)
        self.name = name

    def parse(self, text: str, final: bool) -> Parsed:
        if not text.strip():
            # Nothing of the arguments yet: the call (its name) starts with their first
            # character, as vLLM's, so a reasoning parser that has not yet placed the
            # text (a bare "<think>") opens no call that its reasoning would then close.
            return Parsed(content="" if not final else text)
        end = scan_value(text, 0)
        if end is None:
            if final:
                return Parsed(content=text)
            return Parsed(content="", calls=[PartialCall(name=self.name, arguments=text.lstrip())])
        args = text[:end].strip()
        if loads_object(args) is None:
            return Parsed(content=text)
        return Parsed(
            content="", calls=[PartialCall(name=self.name, arguments=args, complete=True)]
        )


class RequiredToolParser(ToolParser):
    """The output is a JSON array of ``{"name", "parameters"}``."""

    def parse(self, text: str, final: bool) -> Parsed:
        calls, closed = call_array(text, 0, ("parameters",))
        if final and (not closed or not calls or any(c.name is None for c in calls)):
            return Parsed(content=text)
        return Parsed(content="", calls=calls)
