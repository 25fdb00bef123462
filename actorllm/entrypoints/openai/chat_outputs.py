"""One chat choice's text -> OpenAI message fields: reasoning, content and tool calls.

The reasoning parser (``--reasoning-parser``) splits the thinking off first; the tool
parser (from the request's ``tool_choice``) reads calls out of the answer. The same object
serves a whole response (:meth:`ChoiceParser.message`) and a stream
(:meth:`ChoiceParser.delta`, fed the choice's text so far).

    p = ChoiceParser(reasoning=Qwen3ReasoningParser(), tools=HermesToolParser())
    p.message("<think>hm</think>Sure.")   # Message(content="Sure.", reasoning_content="hm")
"""

from __future__ import annotations

from dataclasses import dataclass, field

from actorllm.entrypoints.openai.tool_parsers import (
    DeltaToolCall,
    ToolCall,
    ToolCallStreamer,
    ToolParser,
)
from actorllm.reasoning import ReasoningParser, ReasoningStreamer


@dataclass
class Message:
    content: str | None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)


@dataclass
class Delta:
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[DeltaToolCall] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.content or self.reasoning_content or self.tool_calls)


class ChoiceParser:
    """Stateful for streaming: one per choice."""

    def __init__(
        self,
        reasoning: ReasoningParser | None = None,
        tools: ToolParser | None = None,
        single_call: bool = False,
    ) -> None:
        self.reasoning = reasoning
        self.tools = tools
        # parallel_tool_calls: false — only the first call is returned (vLLM's filter;
        # forced calls are held to one by their schema instead).
        self.single_call = single_call
        self._reasoning_stream = ReasoningStreamer(reasoning) if reasoning else None
        self._tool_stream = ToolCallStreamer(tools) if tools else None
        self._answer = ""  # the answer text seen so far (after the reasoning)

    @property
    def plain(self) -> bool:
        """No reasoning and no tool parser: every new token's text is content."""
        return self.reasoning is None and self.tools is None

    @property
    def tools_called(self) -> bool:
        return self._tool_stream is not None and self._tool_stream.tools_called

    def message(self, text: str) -> Message:
        reasoning, answer = None, text
        if self.reasoning is not None:
            reasoning, answer_or_none = self.reasoning.extract(text)
            answer = answer_or_none or ""
        if self.tools is None:
            content = answer or (None if reasoning else "")
            return Message(content=content, reasoning_content=reasoning)
        extracted = self.tools.extract(answer)
        return Message(
            content=extracted.content if extracted.tools_called else (answer or None),
            reasoning_content=reasoning,
            tool_calls=extracted.tool_calls[:1] if self.single_call else extracted.tool_calls,
        )

    def delta(self, text: str, final: bool = False) -> Delta:
        """The new parts of ``text`` (the choice's text so far)."""
        out = Delta()
        if self._reasoning_stream is None:
            new = text[len(self._answer) :]
            self._answer = text
        else:
            r = self._reasoning_stream.update(text, final)
            out.reasoning_content = r.reasoning_content
            new = r.content or ""
            self._answer += new
        if self._tool_stream is None:
            out.content = new or None
            return out
        t = self._tool_stream.update(self._answer, final)
        out.content = t.content
        out.tool_calls = [c for c in t.tool_calls if c.index == 0 or not self.single_call]
        return out
