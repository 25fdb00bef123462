"""A harmony message's header text -> its fields (author, recipient, channel, content type).

The header is what stands between ``<|start|>`` and ``<|message|>``:
``assistant to=functions.f<|channel|>commentary <|constrain|>json``. Read as
``openai_harmony``'s ``parse_header_from_string``, but never failing.
"""

from __future__ import annotations

import re

from actorllm.core.harmony.messages import CHANNEL, CONSTRAIN, ROLES, HarmonyMessage


def with_content(m: HarmonyMessage, content: str) -> HarmonyMessage:
    return HarmonyMessage(
        m.role, content, name=m.name, recipient=m.recipient, channel=m.channel,
        content_type=m.content_type,
    )  # fmt: skip


def read_header(header: str, role: str | None) -> HarmonyMessage:
    """A finished header's fields (the content empty): the last word is the content type
    (or ``to=recipient``), the word before it the recipient. ``role``: the author when
    the header omits it (the first message of an output), else None."""
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


def cut_header(header: str, role: str | None) -> HarmonyMessage:
    """A header that a stop token cut off (the model forgot ``<|message|>``): what follows
    the author and channel is the content, its spacing kept."""
    msg, rest = _author(header, role)
    return with_content(msg, rest)


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
