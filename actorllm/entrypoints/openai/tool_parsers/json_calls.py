"""Calls written as JSON objects ``{"name": ..., "<args key>": {...}}``: one object, or a
JSON array of them. Shared by the hermes, llama3_json, mistral (pre-v11) and forced
``required`` formats."""

from __future__ import annotations

import re

from actorllm.entrypoints.openai.tool_parsers.base import PartialCall
from actorllm.entrypoints.openai.tool_parsers.json_scan import (
    loads_object,
    scan_value,
    skip_ws,
    string_field,
    value_start,
)

_TRAILING = re.compile(r"[\s}\]]*$")


def call_object(
    text: str, start: int, args_keys: tuple[str, ...]
) -> tuple[PartialCall, int | None]:
    """The call object at ``text[start:]``: (call, end index or None while incomplete).
    A complete object that is not a call has ``name`` None."""
    end = scan_value(text, start)
    body = text[start:end] if end is not None else text[start:]
    name = string_field(body, "name")
    args = ""
    for key in args_keys:
        a = value_start(body, key)
        if a is None:
            continue
        a_end = scan_value(body, a)
        if a_end is not None:
            args = body[a:a_end]
        else:  # still streaming: hold back what could close the outer object
            args = _TRAILING.sub("", body[a:])
        break
    if end is None:
        return PartialCall(name=name, arguments=args), None
    obj = loads_object(body)
    if obj is None or not isinstance(obj.get("name"), str):
        return PartialCall(name=None, arguments=""), end
    if not args:
        args = "{}"  # a call without arguments
    if loads_object(args) is None:
        return PartialCall(name=None, arguments=""), end
    return PartialCall(name=obj["name"], arguments=args, complete=True), end


def call_array(text: str, start: int, args_keys: tuple[str, ...]) -> tuple[list[PartialCall], bool]:
    """The calls in the JSON array at ``text[start:]``: (calls, whether the array closed)."""
    pos = skip_ws(text, start)
    if pos >= len(text) or text[pos] != "[":
        return [], False
    pos += 1
    calls: list[PartialCall] = []
    while True:
        pos = skip_ws(text, pos)
        if pos >= len(text):
            return calls, False
        if text[pos] == "]":
            return calls, True
        if text[pos] == ",":
            pos += 1
            continue
        call, end = call_object(text, pos, args_keys)
        calls.append(call)
        if end is None:
            return calls, False
        pos = end
