"""Harmony's special tokens and its message: a header (author, recipient, channel,
content type) and text content.

    <|start|>{role}[ to={recipient}][<|channel|>{channel}][ {type}]<|message|>{content}<|end|>

(``{role}`` is a tool's name in a tool's message.)
An assistant message addressed to a tool ends with ``<|call|>`` instead; ``<|return|>``
ends the model's final answer (both are stop tokens when sampling).
"""

from __future__ import annotations

from dataclasses import dataclass

START = "<|start|>"
END = "<|end|>"
MESSAGE = "<|message|>"
CHANNEL = "<|channel|>"
CONSTRAIN = "<|constrain|>"
RETURN = "<|return|>"
CALL = "<|call|>"
SPECIAL_TOKENS = (START, END, MESSAGE, CHANNEL, CONSTRAIN, RETURN, CALL)
# Tokens that end a message while parsing (and sampling stops at the last two).
MESSAGE_ENDS = (END, RETURN, CALL)
ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass(frozen=True)
class HarmonyMessage:
    """One message. ``name``: a tool message's author (``functions.get_weather``);
    ``recipient``: the tool an assistant message calls (``functions.get_weather``) or
    ``assistant`` for a tool's answer; ``content_type``: e.g. ``json`` or
    ``<|constrain|>json``."""

    role: str
    content: str = ""
    name: str | None = None
    recipient: str | None = None
    channel: str | None = None
    content_type: str | None = None


@dataclass(frozen=True)
class Segment:
    """A piece of a rendered prompt: ordinary text (tokenized as text, special-token
    strings in it included) or one special token."""

    text: str
    special: bool = False
