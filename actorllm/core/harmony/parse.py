"""A gpt-oss output (detokenized with its special tokens) as harmony messages, read whole
or as it grows.

Theory of operation. The output continues a prompt that ended with ``<|start|>assistant``,
so it opens with the first message's header (``<|channel|>analysis<|message|>...``).
:class:`HarmonyParser` reads it in pieces of any size (a stream's deltas) and keeps its
state between them, so a piece costs work in proportion to its own length (amortised: a
message's text is joined once, when it ends), never to the text before it. The text is cut
at the tokens that move the parser on; a tail that may be the start of one (``<|en``)
waits for the next piece. The states and their moves:

    start    <|start|>                  -> header   (anything else here is dropped)
    header   <|message|>                -> content  (the header is read: a message opens)
    header   <|end|> <|return|> <|call|> -> start    (the header was the content)
    header   <|start|>                  -> header   (restarted: the first header dropped)
    content  <|end|> <|return|> <|call|> -> start    (the message is finished)

In ``content`` every other token is text. Parsing follows ``openai_harmony``'s
``StreamableParser`` but never fails: text outside any message is dropped, a header that a
stop token cuts off becomes that message's content (the library's non-strict mode), and a
header still open when the text ends is reported as ``pending``.

:meth:`HarmonyParser.feed` answers what a piece changed, as events: :class:`Opened` when a
message appears (its header known for good) and :class:`Wrote` when its content grows. The
open message's content is reported less a tail that may still become a special token, so
what is reported is never taken back: a stream's deltas are the events' texts.

    >>> out = parse_output("<|channel|>analysis<|message|>Think.<|end|>"
    ...     "<|start|>assistant<|channel|>final<|message|>Hi")
    >>> [(m.channel, m.content) for m in out.messages], out.current.content
    ([('analysis', 'Think.')], 'Hi')
    >>> p = HarmonyParser()
    >>> p.feed("<|channel|>final<|message|>Hel")[1:], p.feed("lo<|e"), p.feed("nd|>")
    ([Wrote(index=0, text='Hel')], [Wrote(index=0, text='lo')], [])
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, final

from actorllm.core.harmony.header import cut_header, read_header, with_content
from actorllm.core.harmony.messages import (
    MESSAGE,
    MESSAGE_ENDS,
    SPECIAL_TOKENS,
    START,
    HarmonyMessage,
)
from actorllm.core.marker_text import held_length, hold_back

# The tokens that move the parser from one state to another.
_MOVES = (START, MESSAGE, *MESSAGE_ENDS)
_SPLIT = re.compile("(" + "|".join(re.escape(t) for t in _MOVES) + ")")

State = Literal["start", "header", "content"]


@dataclass(frozen=True)
class Opened:
    """Message ``index`` appeared: its header is read (content empty here) and final."""

    index: int
    message: HarmonyMessage


@dataclass(frozen=True)
class Wrote:
    """Message ``index``'s content grew by ``text`` (never empty)."""

    index: int
    text: str


Event = Opened | Wrote


@dataclass(frozen=True)
class ParserStatistics:
    state: State
    messages: int  # finished messages
    fed: int  # characters fed
    scanned: int  # characters cut at tokens: each fed one once, plus held tails again
    held: int  # characters waiting for the next piece (the start of a token, perhaps)


@dataclass
class HarmonyOutput:
    """``messages``: the finished ones; ``current``: the one whose content is still being
    written (None between messages); ``pending``: a header was started but not finished."""

    messages: list[HarmonyMessage] = field(default_factory=list)
    current: HarmonyMessage | None = None
    pending: bool = False

    def all(self) -> list[HarmonyMessage]:
        """The finished messages and the current one."""
        return self.messages + ([self.current] if self.current is not None else [])


def parse_output(
    text: str, role: str | None = "assistant", *, final: bool = False
) -> HarmonyOutput:
    """``text`` parsed whole. ``role``: the author of the first message (its header omits
    the role); None when ``text`` starts with ``<|start|>``. ``final``: the text is
    complete, so an unfinished message counts as finished (the stop token that ended it is
    not in the text)."""
    parser = HarmonyParser(role)
    parser.feed(text, final=final)
    return parser.output()


@final
class HarmonyParser:
    """One output's parse, fed piece by piece (one parser per stream). ``role``: as for
    :func:`parse_output`."""

    def __init__(self, role: str | None = "assistant") -> None:
        self.messages: list[HarmonyMessage] = []  # the finished ones, in order
        self._state: State = "header" if role is not None else "start"
        self._role = role  # the author while the header omits it (the first message)
        self._header: list[str] = []  # the open header's pieces
        self._head: HarmonyMessage | None = None  # the open message's header (content)
        self._content: list[str] = []  # the open message's content pieces
        self._unsent: list[str] = []  # the end of that content not yet in a Wrote
        self._tail = ""  # fed text not cut yet: it may be the start of a token
        self._events: list[Event] = []  # what the piece being read changed
        self._fed = 0
        self._scanned = 0

    def feed(self, text: str, *, final: bool = False) -> list[Event]:
        """Read the next piece of the output; what it changed. ``final``: the output ends
        with this piece, so the open message is finished and a header it ends in is a
        message too (a stop token cut it off); feed nothing after it."""
        self._fed += len(text)
        text = self._tail + text
        self._scanned += len(text)
        # At the end, the start of a token that never came is text.
        cut = len(text) if final else len(text) - held_length(text, _MOVES)
        self._tail = text[cut:]
        for piece in _SPLIT.split(text[:cut]):
            if piece:
                self._step(piece)
        if final:
            self._finish()
        elif self._state == "content":
            self._write_open()
        return self._take_events()

    def output(self) -> HarmonyOutput:
        """The messages so far (the open one's content less a token's possible start)."""
        out = HarmonyOutput(messages=list(self.messages))
        if self._state == "content" and self._head is not None:
            content = "".join(self._content) + self._tail
            out.current = with_content(self._head, hold_back(content, SPECIAL_TOKENS))
        elif self._state == "header":
            out.pending = bool(("".join(self._header) + self._tail).strip())
        return out

    def statistics(self) -> ParserStatistics:
        return ParserStatistics(
            state=self._state,
            messages=len(self.messages),
            fed=self._fed,
            scanned=self._scanned,
            held=len(self._tail),
        )

    def _step(self, piece: str) -> None:
        """One piece: a moving token, or text between them."""
        if self._state == "start":
            if piece == START:
                self._state, self._header, self._role = "header", [], None
        elif self._state == "header":
            if piece == MESSAGE:
                self._open(read_header("".join(self._header), self._role))
            elif piece in MESSAGE_ENDS:
                self._cut()
            elif piece == START:
                self._header, self._role = [], None
            else:
                self._header.append(piece)
        elif piece in MESSAGE_ENDS:
            self._close()
        else:
            self._content.append(piece)
            self._unsent.append(piece)

    def _open(self, head: HarmonyMessage) -> None:
        self._state, self._head, self._content, self._unsent = "content", head, [], []
        self._events.append(Opened(len(self.messages), head))

    def _write_open(self) -> None:
        """Report the open message's new content, less a tail that may still become a
        special token (never less than what is already reported: see the module's
        docstring)."""
        unsent = "".join(self._unsent)
        # At least the held tail itself is held: it is the start of a token.
        keep = held_length(unsent + self._tail, SPECIAL_TOKENS) - len(self._tail)
        if keep < len(unsent):
            self._events.append(Wrote(len(self.messages), unsent[: len(unsent) - keep]))
        self._unsent = [unsent[len(unsent) - keep :]] if keep else []

    def _close(self) -> None:
        """An end token: the open message is finished, all of its content settled."""
        assert self._head is not None
        unsent = "".join(self._unsent)
        if unsent:
            self._events.append(Wrote(len(self.messages), unsent))
        self.messages.append(with_content(self._head, "".join(self._content)))
        self._state, self._head, self._content, self._unsent = "start", None, [], []

    def _cut(self) -> None:
        """An end token closed a header: what follows its author and channel is content."""
        msg = cut_header("".join(self._header), self._role)
        index = len(self.messages)
        self._events.append(Opened(index, with_content(msg, "")))
        if msg.content:
            self._events.append(Wrote(index, msg.content))
        self.messages.append(msg)
        self._state = "start"

    def _finish(self) -> None:
        if self._state == "content":
            self._close()
        elif self._state == "header" and "".join(self._header).strip():
            self._cut()
        self._state = "start"

    def _take_events(self) -> list[Event]:
        events, self._events = self._events, []
        return events
