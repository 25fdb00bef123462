"""One gpt-oss chat choice's harmony text -> reasoning, content and tool calls.

Every channel is read from the whole text (special tokens kept): ``analysis`` is the
reasoning, ``final`` (and, streamed, tool-call preambles) the content, ``commentary``
messages to ``functions.NAME`` the tool calls when the request has a tool parser
(``--tool-call-parser openai``). Streaming diffs the growing parts, so the concatenated
deltas equal the whole message.
"""

from __future__ import annotations

from actorllm.core.harmony import parse_output
from actorllm.entrypoints.openai.chat_outputs import ChoiceParser, Delta, Message
from actorllm.entrypoints.openai.tool_parsers import OpenAIToolParser, ToolCallStreamer
from actorllm.entrypoints.openai.tool_parsers.openai import visible_texts
from actorllm.reasoning.gptoss import reasoning_text


class HarmonyChoiceParser(ChoiceParser):
    """``tools``: function calls are parsed (a tool parser is set and the request allows
    calls); otherwise calls the model writes are neither content nor calls."""

    def __init__(self, tools: bool, single_call: bool = False) -> None:
        parser = OpenAIToolParser() if tools else None
        super().__init__(reasoning=None, tools=parser, single_call=single_call)
        self._harmony_tools = parser
        self._calls = ToolCallStreamer(parser) if parser is not None else None
        self._reasoning_sent = 0
        self._content_sent = 0

    @property
    def plain(self) -> bool:
        return False

    @property
    def tools_called(self) -> bool:
        return self._calls is not None and self._calls.tools_called

    def message(self, text: str) -> Message:
        out = parse_output(text, final=True)
        reasoning = reasoning_text(out.messages)
        if self._harmony_tools is not None:
            extracted = self._harmony_tools.extract(text)
            calls = extracted.tool_calls[:1] if self.single_call else extracted.tool_calls
            return Message(extracted.content, reasoning, calls)
        final, _ = visible_texts(out.messages)
        return Message(content="\n".join(final) if final else None, reasoning_content=reasoning)

    def delta(self, text: str, final: bool = False) -> Delta:
        out = Delta()
        msgs = parse_output(text, final=final).all()
        reasoning = reasoning_text(msgs) or ""
        if len(reasoning) > self._reasoning_sent:
            out.reasoning_content = reasoning[self._reasoning_sent :]
            self._reasoning_sent = len(reasoning)
        if self._calls is not None:
            t = self._calls.update(text, final)
            out.content = t.content
            out.tool_calls = [c for c in t.tool_calls if c.index == 0 or not self.single_call]
            return out
        shown, _ = visible_texts(msgs)
        content = "\n".join(shown)
        if len(content) > self._content_sent:
            out.content = content[self._content_sent :]
            self._content_sent = len(content)
        return out
