"""Hermes / Qwen2.5 / Qwen3 (the default template): one JSON object per call, each in
``<tool_call>`` tags, after optional content::

    Let me check.<tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>
"""

from __future__ import annotations

import json

from actorllm.entrypoints.openai.tool_parsers.base import Parsed, ToolParser
from actorllm.entrypoints.openai.tool_parsers.json_calls import call_object

OPEN, CLOSE = "<tool_call>", "</tool_call>"


class HermesToolParser(ToolParser):
    markers = (OPEN,)

    def strict_call_tag(self, name: str) -> tuple[str, str, str]:
        # The templates' own layout: <tool_call>, a newline, the object, a newline.
        return OPEN, f'{OPEN}\n{{"name": {json.dumps(name)}, "arguments": ', "}\n" + CLOSE

    def parse(self, text: str, final: bool) -> Parsed:
        first = text.find(OPEN)
        if first < 0:
            return Parsed(content=text)
        parsed = Parsed(content=text[:first])
        pos = first
        while pos >= 0:
            call, end = call_object(text, pos + len(OPEN), ("arguments", "parameters"))
            if end is None:
                if final:
                    return Parsed(content=text)
                parsed.calls.append(call)
                break
            if call.name is None:  # not a call after all
                if final:
                    return Parsed(content=text)
                break
            parsed.calls.append(call)
            pos = text.find(OPEN, end)
        return parsed
