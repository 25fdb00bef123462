"""gpt-oss's function calls (``--tool-call-parser openai``, vLLM's name): harmony messages
on the ``commentary`` channel addressed ``to=functions.NAME``, their content the arguments.

The text is the whole harmony output (special tokens kept): :meth:`parse` reads every
message, so the content it returns is what the user may see — the ``final`` channel and
tool-call preambles (``commentary`` without a recipient) — and never the reasoning.

    >>> p = OpenAIToolParser()
    >>> r = p.extract('<|channel|>analysis<|message|>Need the tool.<|end|><|start|>assistant'
    ...     '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>'
    ...     '{"city":"Oslo"}')
    >>> r.content, r.tool_calls[0].function.name, r.tool_calls[0].function.arguments
    (None, 'get_weather', '{"city": "Oslo"}')
"""

from __future__ import annotations

import contextlib
import json

from actorllm.core.harmony import HarmonyMessage, parse_output
from actorllm.entrypoints.openai.tool_parsers.base import (
    ExtractedToolCalls,
    FunctionCall,
    Parsed,
    PartialCall,
    ToolCall,
    ToolParser,
)

FUNCTIONS = "functions."


def function_name(msg: HarmonyMessage) -> str | None:
    """The function an assistant message calls, or None (built-in tools are not ours)."""
    r = msg.recipient
    if msg.role != "assistant" or not r or not r.startswith(FUNCTIONS) or r == FUNCTIONS:
        return None
    return r[len(FUNCTIONS) :]


def visible_texts(messages: list[HarmonyMessage]) -> tuple[list[str], list[str]]:
    """(final-channel texts, preamble texts): what the user may see."""
    final = [m.content for m in messages if m.channel == "final" and function_name(m) is None]
    preambles = [m.content for m in messages if m.channel == "commentary" and m.recipient is None]
    return final, preambles


class OpenAIToolParser(ToolParser):
    keeps_special_tokens = True

    def parse(self, text: str, final: bool) -> Parsed:
        out = parse_output(text, final=final)
        calls = []
        shown = []
        for msg in out.all():
            name = function_name(msg)
            if name is not None:
                done = msg is not out.current
                calls.append(PartialCall(name=name, arguments=msg.content, complete=done))
            elif msg.channel in ("final", "commentary") and msg.recipient is None:
                shown.append(msg.content)
        return Parsed(content="\n".join(shown), calls=calls)

    def extract(self, text: str) -> ExtractedToolCalls:
        """vLLM's: JSON arguments re-serialized (``json.dumps(json.loads(...))``), the
        final answer as content, else a preamble."""
        out = parse_output(text, final=True)
        calls = []
        for msg in out.messages:
            name = function_name(msg)
            if name is None:
                continue
            args = msg.content
            if not msg.content_type or "json" in msg.content_type:
                # Not JSON after all: passed on as written.
                with contextlib.suppress(ValueError):
                    args = json.dumps(json.loads(args))
            calls.append(
                ToolCall(id=self.new_call_id(), function=FunctionCall(name=name, arguments=args))
            )
        final, preambles = visible_texts(out.messages)
        shown = final or preambles
        return ExtractedToolCalls(content=shown[-1] if shown else None, tool_calls=calls)
