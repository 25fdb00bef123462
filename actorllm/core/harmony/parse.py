"""A gpt-oss output (detokenized with its special tokens) as harmony messages.

The output continues a prompt that ended with ``<|start|>assistant``, so it opens with the
first message's header (``<|channel|>analysis<|message|>...``). Parsing follows
``openai_harmony``'s ``StreamableParser`` (channel after ``<|channel|>``, recipient
``to=...``, content type last, ``<|end|>`` / ``<|return|>`` / ``<|call|>`` close a
message) but never fails: text outside any message is dropped, a header that a stop token
cuts off becomes that message's content (the library's non-strict mode), and a header
still open when the text ends is reported as ``pending``.

    >>> out = parse_output("<|channel|>analysis<|message|>Think.<|end|>"
    ...     "<|start|>assistant<|channel|>final<|message|>Hi")
    >>> [(m.channel, m.content) for m in out.messages], out.current.content
    ([('analysis', 'Think.')], 'Hi')
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from actorllm.core.harmony.messages import (
    CHANNEL,
    CONSTRAIN,
    MESSAGE,
    MESSAGE_ENDS,
    ROLES,
    SPECIAL_TOKENS,
    START,
    HarmonyMessage,
)
from actorllm.core.marker_text import hold_back

_SPLIT = re.compile("(" + "|".join(re.escape(t) for t in (START, MESSAGE, *MESSAGE_ENDS)) + ")")


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
    """``role``: the author of the first message (its header omits the role); None when
    ``text`` starts with ``<|start|>``. ``final``: the text is complete, so an unfinished
    message counts as finished (the stop token that ended it is not in the text)."""
    out = HarmonyOutput()
    state = "header" if role is not None else "start"
    header, content = "", ""
    head: HarmonyMessage | None = None
    for piece in _SPLIT.split(text):
        if not piece:
            continue
        if state == "start":
            if piece == START:
                state, header, role = "header", "", None
            continue  # text between messages carries nothing
        if state == "header":
            if piece == MESSAGE:
                head, state, content = _header(header, role), "content", ""
            elif piece in MESSAGE_ENDS:
                out.messages.append(_cut_header(header, role))
                state = "start"
            elif piece == START:
                header, role = "", None  # a header restarted: the first one is dropped
            else:
                header += piece
            continue
        # state == "content"
        if piece in MESSAGE_ENDS:
            assert head is not None
            out.messages.append(_with(head, content))
            state = "start"
        else:
            content += piece
    if state == "content" and head is not None:
        if final:
            out.messages.append(_with(head, content))
        else:  # a special token's name cut short is not content yet
            out.current = _with(head, hold_back(content, SPECIAL_TOKENS))
    elif state == "header" and header.strip():
        if final:
            out.messages.append(_cut_header(header, role))
        else:
            out.pending = True
    return out


def _with(m: HarmonyMessage, content: str) -> HarmonyMessage:
    return HarmonyMessage(
        m.role, content, name=m.name, recipient=m.recipient, channel=m.channel,
        content_type=m.content_type,
    )  # fmt: skip


def _header(header: str, role: str | None) -> HarmonyMessage:
    """A finished header's fields, as ``parse_header_from_string``: the last word is the
    content type (or ``to=recipient``), the word before it the recipient."""
    msg, rest = _author(header, role)
    if CONSTRAIN in rest:
        rest = rest.replace(CONSTRAIN, f" {CONSTRAIN}")
    parts = rest.split()
    recipient = content_type = None
    if parts:
        last = parts.pop()
        if last.startswith("to="):
            recipient = last[3:]
        elif not parts and not last.startswith(CONSTRAIN):
            recipient = last
        else:
            content_type = last
            if parts:
                raw = parts.pop()
                recipient = raw[3:] if raw.startswith("to=") else raw
    return HarmonyMessage(
        msg.role, name=msg.name, recipient=recipient, channel=msg.channel,
        content_type=content_type,
    )  # fmt: skip


def _cut_header(header: str, role: str | None) -> HarmonyMessage:
    """A header that a stop token cut off (the model forgot ``<|message|>``): what follows
    the author and channel is the content, its spacing kept."""
    msg, rest = _author(header, role)
    return _with(msg, rest)


def _author(header: str, role: str | None) -> tuple[HarmonyMessage, str]:
    """The channel and the author (role, or a tool's name), and the rest of the header."""
    channel = None
    i = header.find(CHANNEL)
    if i >= 0:
        after = header[i + len(CHANNEL) :]
        word = re.match(r"[^\s<]*", after)
        value = word.group(0) if word else ""
        channel = value or None
        header = header[:i] + after[len(value) :]
    rest = header.strip()
    first, tail = [*rest.split(None, 1), ""][:2] if rest else ("", "")
    name = None
    if role is None:
        if not first:
            role = "assistant"
        elif first in ROLES:
            role, rest = first, tail
        else:  # a tool's message: the author is the tool's name
            role, name, rest = "tool", first or None, tail
    elif first == role:
        rest = tail
    return HarmonyMessage(role, name=name, channel=channel), rest.strip()
