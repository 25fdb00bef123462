"""Tool-call parsers: model text -> OpenAI ``tool_calls``, whole or as streamed deltas.

Every family's parser implements one method, :meth:`ToolParser.parse`: cut the text
generated so far into leading content and calls. A call still being generated is a
:class:`PartialCall` whose ``arguments`` only ever grow (each version is a prefix of the
next, and of the final arguments JSON), so streaming is a diff done once, here, for every
family (:class:`ToolCallStreamer`): content first; then for each call one delta with its
index, id, type and name, followed by argument fragments — exactly the shape OpenAI
streams.

    parser = get_tool_parser("hermes")(tokenizer)
    result = parser.extract('<tool_call>{"name": "f", "arguments": {}}</tool_call>')
    result.tool_calls[0].function.name      # 'f'
"""

from __future__ import annotations

import secrets
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgspec

from actorllm.core.marker_text import hold_back


class FunctionCall(msgspec.Struct, kw_only=True):
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCall(msgspec.Struct, kw_only=True):
    id: str
    type: str = "function"
    function: FunctionCall


class DeltaFunctionCall(msgspec.Struct, kw_only=True, omit_defaults=True):
    name: str | None = None
    arguments: str | None = None


class DeltaToolCall(msgspec.Struct, kw_only=True, omit_defaults=True):
    index: int
    id: str | None = None
    type: str | None = None
    function: DeltaFunctionCall | None = None


@dataclass
class PartialCall:
    name: str | None  # None until the name is complete
    arguments: str  # JSON text so far; grows by appending only
    complete: bool = False


@dataclass
class Parsed:
    content: str  # text that is surely not part of a call
    calls: list[PartialCall] = field(default_factory=list)


@dataclass
class ExtractedToolCalls:
    content: str | None
    tool_calls: list[ToolCall]

    @property
    def tools_called(self) -> bool:
        return bool(self.tool_calls)


def make_call_id() -> str:
    """``call_`` and 24 random hex digits (OpenAI's shape)."""
    return "call_" + secrets.token_hex(12)


class ToolParser(ABC):
    """One model family's tool-call format. Subclasses set ``markers`` (the strings that
    open a call: content that might be the start of one is held back while streaming)."""

    markers: ClassVar[tuple[str, ...]] = ()
    # The call markers are special tokens the detokenizer must keep.
    keeps_special_tokens: ClassVar[bool] = False

    def __init__(self, tokenizer: Any = None, tools: list[dict[str, Any]] | None = None) -> None:
        self.tokenizer = tokenizer
        # The request's tools (OpenAI shape): formats whose arguments are not JSON in the
        # text read the parameter types from them.
        self.tools = tools or []

    def parameter_schema(self, function_name: str) -> dict[str, Any]:
        """The ``parameters`` schema of the request's function ``function_name`` ({})."""
        for tool in self.tools:
            fn = tool.get("function") or {}
            if fn.get("name") == function_name:
                params = fn.get("parameters")
                return params if isinstance(params, dict) else {}
        return {}

    @abstractmethod
    def parse(self, text: str, final: bool) -> Parsed:
        """Cut ``text`` into content and calls. ``final``: the text is complete (calls that
        do not parse are then content); otherwise the last call may be cut short."""

    def strict_call_tag(self, name: str) -> tuple[str, str, str] | None:
        """How a call of ``name`` is written, as (trigger, begin, end) around its JSON
        arguments: structured outputs force a strict function's arguments (``"strict":
        true`` under tool_choice auto) once the model starts a call. None: this format
        cannot be forced that way, and strict functions are refused."""
        del name
        return None

    def new_call_id(self) -> str:
        return make_call_id()

    def adjust_request(self, body: dict[str, Any]) -> dict[str, Any]:
        """Request changes this format needs (e.g. keep special tokens)."""
        if self.keeps_special_tokens:
            body = {**body, "skip_special_tokens": False}
        return body

    def extract(self, text: str) -> ExtractedToolCalls:
        """The whole generated text -> content and complete tool calls."""
        parsed = self.parse(text, final=True)
        calls = [
            ToolCall(
                id=self.new_call_id(), function=FunctionCall(name=c.name, arguments=c.arguments)
            )
            for c in parsed.calls
            if c.complete and c.name is not None
        ]
        if not calls:
            return ExtractedToolCalls(content=text, tool_calls=[])
        return ExtractedToolCalls(content=parsed.content or None, tool_calls=calls)


@dataclass
class StreamDelta:
    content: str | None = None
    tool_calls: list[DeltaToolCall] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.content and not self.tool_calls


class ToolCallStreamer:
    """Turns growing text into OpenAI deltas for one choice. Feed the cumulative text."""

    def __init__(self, parser: ToolParser) -> None:
        self.parser = parser
        self._content_sent = 0  # characters of content already sent
        self._ids: list[str] = []  # per call index
        self._names_sent: list[bool] = []
        self._args_sent: list[int] = []  # characters of arguments already sent

    @property
    def tools_called(self) -> bool:
        return any(self._names_sent)

    def update(self, text: str, final: bool = False) -> StreamDelta:
        parsed = self.parser.parse(text, final)
        content = parsed.content
        if not final and not parsed.calls:
            content = hold_back(content, self.parser.markers)
        delta = StreamDelta()
        if len(content) > self._content_sent and not self._names_sent:
            delta.content = content[self._content_sent :]
            self._content_sent = len(content)
        for i, call in enumerate(parsed.calls):
            if call.name is None:
                break  # later calls cannot be named before this one
            if i == len(self._ids):
                self._ids.append(self.parser.new_call_id())
                self._names_sent.append(True)
                self._args_sent.append(0)
                delta.tool_calls.append(
                    DeltaToolCall(
                        index=i,
                        id=self._ids[i],
                        type="function",
                        function=DeltaFunctionCall(name=call.name, arguments=""),
                    )
                )
            fragment = call.arguments[self._args_sent[i] :]
            if fragment:
                self._args_sent[i] = len(call.arguments)
                delta.tool_calls.append(
                    DeltaToolCall(index=i, function=DeltaFunctionCall(arguments=fragment))
                )
        return delta
