"""Mistral: ``[TOOL_CALLS]`` then the calls. Tokenizers before v11 write a JSON array;
v11 and later write ``name[ARGS]{...}`` per call, each after its own ``[TOOL_CALLS]``::

    [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]
    [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}

``[TOOL_CALLS]`` is a special token, so the detokenizer must keep special tokens. Mistral
chat templates only accept 9-character alphanumeric call ids.
"""

from __future__ import annotations

import secrets
import string

from actorllm.entrypoints.openai.tool_parsers.base import Parsed, PartialCall, ToolParser
from actorllm.entrypoints.openai.tool_parsers.json_calls import call_array
from actorllm.entrypoints.openai.tool_parsers.json_scan import loads_object, scan_value, skip_ws

BOT, ARGS = "[TOOL_CALLS]", "[ARGS]"
_ALNUM = string.ascii_letters + string.digits


class MistralToolParser(ToolParser):
    markers = (BOT,)
    keeps_special_tokens = True

    def new_call_id(self) -> str:
        return "".join(secrets.choice(_ALNUM) for _ in range(9))

    def parse(self, text: str, final: bool) -> Parsed:
        first = text.find(BOT)
        if first < 0:
            return Parsed(content=text)
        content = text[:first]
        pos = skip_ws(text, first + len(BOT))
        if pos < len(text) and text[pos] == "[":
            calls, closed = call_array(text, pos, ("arguments",))
            if final and (not closed or any(c.name is None for c in calls)):
                return Parsed(content=text)
            return Parsed(content=content, calls=calls)
        return self._v11(text, first, content, final)

    def _v11(self, text: str, first: int, content: str, final: bool) -> Parsed:
        parsed = Parsed(content=content)
        for chunk in text[first + len(BOT) :].split(BOT):
            if ARGS not in chunk:
                if final:
                    return Parsed(content=text)
                parsed.calls.append(PartialCall(name=None, arguments=""))
                break
            name, args = chunk.split(ARGS, 1)
            end = scan_value(args, 0)
            if end is None:
                if final:
                    return Parsed(content=text)
                parsed.calls.append(PartialCall(name=name.strip(), arguments=args.lstrip()))
                break
            body = args[:end].strip()
            if loads_object(body) is None:
                return Parsed(content=text) if final else parsed
            parsed.calls.append(PartialCall(name=name.strip(), arguments=body, complete=True))
        return parsed
