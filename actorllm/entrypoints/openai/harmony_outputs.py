"""One gpt-oss chat choice's harmony text -> reasoning, content and tool calls.

Every channel is read from the text (special tokens kept): ``analysis`` is the reasoning,
``final`` (and, streamed, tool-call preambles) the content, ``commentary`` messages to
``functions.NAME`` the tool calls when the request has a tool parser
(``--tool-call-parser openai``). A streamed choice owns one :class:`HarmonyParser` and feeds
it only the new text; a message's header says which parts its content goes to, and the
parser's events are the deltas: the concatenated deltas equal the whole message, and a
delta costs what it is long, not what came before it.
"""

from __future__ import annotations

from actorllm.core.harmony import (
    HarmonyMessage,
    HarmonyParser,
    Opened,
    ParserStatistics,
    parse_output,
)
from actorllm.entrypoints.openai.chat_outputs import ChoiceParser, Delta, Message
from actorllm.entrypoints.openai.tool_parsers import DeltaToolCall, OpenAIToolParser
from actorllm.entrypoints.openai.tool_parsers.base import DeltaFunctionCall
from actorllm.entrypoints.openai.tool_parsers.openai import function_name, visible_texts
from actorllm.reasoning.gptoss import is_reasoning, reasoning_text


class _Lines:
    """A part whose messages are joined one per line (reasoning, content): what the delta
    being built adds to it."""

    def __init__(self) -> None:
        self.messages = 0  # messages in this part so far
        self.new: list[str] = []

    def open(self) -> None:
        if self.messages:
            self.new.append("\n")
        self.messages += 1

    def write(self, text: str) -> None:
        self.new.append(text)

    def take(self) -> str | None:
        text = "".join(self.new)
        self.new.clear()
        return text or None


class _Call:
    """One tool call: its index, id and name first, then its arguments as they grow."""

    def __init__(self, index: int, call_id: str, name: str, out: list[DeltaToolCall]) -> None:
        self.index, self.call_id, self.name, self.out = index, call_id, name, out

    def open(self) -> None:
        fn = DeltaFunctionCall(name=self.name, arguments="")
        self.out.append(
            DeltaToolCall(index=self.index, id=self.call_id, type="function", function=fn)
        )

    def write(self, text: str) -> None:
        self.out.append(DeltaToolCall(index=self.index, function=DeltaFunctionCall(arguments=text)))


class HarmonyChoiceParser(ChoiceParser):
    """``tools``: function calls are parsed (a tool parser is set and the request allows
    calls); otherwise calls the model writes are neither content nor calls."""

    def __init__(self, tools: bool, single_call: bool = False) -> None:
        parser = OpenAIToolParser() if tools else None
        super().__init__(reasoning=None, tools=parser, single_call=single_call)
        self._harmony_tools = parser
        self._stream = HarmonyParser()
        self._fed = 0  # characters of the choice's text fed to the stream
        self._routes: list[list[_Lines | _Call]] = []  # per message: the parts it goes to
        self._reasoning = _Lines()
        self._content = _Lines()
        self._calls = 0  # tool calls streamed
        self._call_deltas: list[DeltaToolCall] = []  # the delta being built's

    @property
    def plain(self) -> bool:
        return False

    @property
    def tools_called(self) -> bool:
        return self._calls > 0

    def statistics(self) -> ParserStatistics:
        return self._stream.statistics()

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
        """``text``: the choice's text so far (it only grows)."""
        events = self._stream.feed(text[self._fed :], final=final)
        self._fed = len(text)
        called = self.tools_called  # the content stops at the first call
        for event in events:
            if isinstance(event, Opened):
                self._routes.append(self._route(event.message))
                for part in self._routes[-1]:
                    part.open()
            else:
                for part in self._routes[event.index]:
                    part.write(event.text)
        out = Delta(reasoning_content=self._reasoning.take(), content=self._content.take())
        if called:
            out.content = None
        calls = self._call_deltas  # the calls write to this very list: emptied, not replaced
        out.tool_calls = [c for c in calls if c.index == 0 or not self.single_call]
        calls.clear()
        return out

    def _route(self, msg: HarmonyMessage) -> list[_Lines | _Call]:
        """The parts a message's content goes to: the reasoning (``analysis``), the content
        (``final``; with tools, preambles too) or a tool call of its own."""
        parts: list[_Lines | _Call] = [self._reasoning] if is_reasoning(msg) else []
        name = function_name(msg)
        if self._harmony_tools is None:
            if msg.channel == "final" and name is None:
                parts.append(self._content)
        elif name is not None:
            call_id = self._harmony_tools.new_call_id()
            parts.append(_Call(self._calls, call_id, name, self._call_deltas))
            self._calls += 1
        elif msg.channel in ("final", "commentary") and msg.recipient is None:
            parts.append(self._content)
        return parts
