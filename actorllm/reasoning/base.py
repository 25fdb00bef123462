"""Reasoning parsers: split a reasoning model's output into ``reasoning_content`` and
``content``, whole or as streamed deltas.

Each family implements :meth:`ReasoningParser.split` on the text so far; the reasoning only
grows until the answer starts, so :class:`ReasoningStreamer` emits ``delta.reasoning_content``
then ``delta.content`` by diffing, holding back text that may be the start of a marker.
Families with a single-token end marker (``</think>``) also name it
(``end_marker``), families with plain-text markers name those (``start_texts``,
``end_texts``): the engine applies structured outputs only after the reasoning ends.

Whether an output starts inside the reasoning is :meth:`ReasoningParser.thinking_of` the
request's effective ``chat_template_kwargs`` (the request's over
``--default-chat-template-kwargs``, as the template got them), as vLLM's parsers decide it;
the engine's structured-output gate asks the same method, so both agree on a request.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from actorllm.core.marker_text import hold_back


@dataclass
class Split:
    reasoning: str | None  # None: this output has no reasoning part
    content: str
    reasoning_done: bool  # the answer has started


class ReasoningParser(ABC):
    # Strings whose prefix at the end of the text is held back while streaming.
    markers: ClassVar[tuple[str, ...]] = ()
    # The text that ends the reasoning (structured outputs start after it), if any.
    start_marker: ClassVar[str | None] = None
    end_marker: ClassVar[str | None] = None
    # Whether the two markers open and close the reasoning, so thinking_token_budget can
    # count between them and force the end (vLLM's reasoning_start_str / _end_str).
    budget_markers: ClassVar[bool] = True
    # Plain-text markers (no special tokens): structured outputs start after the output
    # writes one of ``end_texts``. Whether the output starts in reasoning is
    # ``text_rule``'s (structured_output/reasoning_gate.py): "asked" (the prompt holds one
    # of ``start_texts``: the template asked for it) or "unless_closed" (unless the prompt
    # closed a block after its last start).
    start_texts: ClassVar[tuple[str, ...]] = ()
    end_texts: ClassVar[tuple[str, ...]] = ()
    text_rule: ClassVar[Literal["asked", "unless_closed"]] = "asked"
    # The markers are special tokens the detokenizer would drop (Mistral's [THINK]).
    keeps_special_tokens: ClassVar[bool] = False

    def __init__(
        self, tokenizer: Any = None, chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        self.tokenizer = tokenizer
        # True: the output starts inside the reasoning; False: it is all answer; None: the
        # output's own markers decide.
        self.thinking = self.thinking_of(chat_template_kwargs or {})

    @classmethod
    def thinking_of(cls, chat_template_kwargs: Mapping[str, Any]) -> bool | None:
        """Whether a request with these effective ``chat_template_kwargs`` thinks: its
        output starts inside the reasoning (True), is all answer (False), or opens the
        reasoning with its own marker if at all (None, this default)."""
        return None

    @abstractmethod
    def split(self, text: str, final: bool) -> Split: ...

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """(reasoning_content, content) of a whole output; empty parts are None."""
        s = self.split(text, final=True)
        return (s.reasoning or None), (s.content or None)


@dataclass
class ReasoningDelta:
    reasoning_content: str | None = None
    content: str | None = None


class ReasoningStreamer:
    def __init__(self, parser: ReasoningParser) -> None:
        self.parser = parser
        self._reasoning_sent = 0
        self._content_sent = 0

    def update(self, text: str, final: bool = False) -> ReasoningDelta:
        s = self.parser.split(text, final)
        reasoning, content = s.reasoning or "", s.content
        if not final:
            if s.reasoning_done:
                content = hold_back(content, self.parser.markers)
            elif s.reasoning is not None:
                reasoning = hold_back(reasoning, self.parser.markers)
            else:
                content = hold_back(content, self.parser.markers)
        delta = ReasoningDelta()
        if len(reasoning) > self._reasoning_sent:
            delta.reasoning_content = reasoning[self._reasoning_sent :]
            self._reasoning_sent = len(reasoning)
        if len(content) > self._content_sent:
            delta.content = content[self._content_sent :]
            self._content_sent = len(content)
        return delta
