"""Llama 3.1 / 3.2 JSON tool calls: the whole answer is one or more JSON objects with
``name`` and ``parameters``, separated by ``;``, optionally after ``<|python_tag|>``::

    {"name": "get_weather", "parameters": {"city": "Paris"}}
"""

from __future__ import annotations

import json

from actorllm.entrypoints.openai.tool_parsers.base import Parsed, ToolParser
from actorllm.entrypoints.openai.tool_parsers.json_calls import call_object
from actorllm.entrypoints.openai.tool_parsers.json_scan import skip_ws

PYTHON_TAG = "<|python_tag|>"


class Llama3JsonToolParser(ToolParser):
    markers = (PYTHON_TAG,)

    def strict_call_tag(self, name: str) -> tuple[str, str, str]:
        return '{"name": ', f'{{"name": {json.dumps(name)}, "parameters": ', "}"

    def parse(self, text: str, final: bool) -> Parsed:
        pos = skip_ws(text, 0)
        if text.startswith(PYTHON_TAG, pos):
            pos = skip_ws(text, pos + len(PYTHON_TAG))
        elif not text.startswith("{", pos):
            if not final and PYTHON_TAG.startswith(text[pos:]):
                return Parsed(content="")  # may become the tag
            return Parsed(content=text)
        parsed = Parsed(content="")
        while pos < len(text):
            if text[pos] != "{":
                return Parsed(content=text) if final else parsed
            call, end = call_object(text, pos, ("parameters", "arguments"))
            if end is None:
                if final:
                    return Parsed(content=text)
                parsed.calls.append(call)
                return parsed
            if call.name is None:
                return Parsed(content=text) if final else parsed
            parsed.calls.append(call)
            pos = skip_ws(text, end)
            if text.startswith(";", pos):
                pos = skip_ws(text, pos + 1)
        if final and not parsed.calls:
            return Parsed(content=text)
        return parsed
