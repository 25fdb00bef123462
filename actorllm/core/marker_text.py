"""Streaming text that may contain markers (``<tool_call>``, ``</think>``): hold back a tail
that could still turn into one, so no marker is ever half-sent as plain text.

    >>> hold_back("Let me check <tool", ("<tool_call>",))
    'Let me check '
"""

from __future__ import annotations

import functools


def held_length(text: str, markers: tuple[str, ...]) -> int:
    """The length of ``text``'s longest tail that is a proper prefix of one of ``markers``.
    Reads only the last characters (a marker's length), so the cost does not grow with
    ``text``."""
    held = 0
    for first, longest, group in _by_first_character(markers):
        # Such a tail starts with its marker's first character: try those places, the
        # earliest (the longest tail) first, among the tails longer than the one found.
        i = text.find(first, max(0, len(text) - longest + 1), len(text) - held)
        while i >= 0:
            tail = text[i:]
            if any(len(tail) < len(m) and m.startswith(tail) for m in group):
                held = len(tail)
                break
            i = text.find(first, i + 1, len(text) - held)
    return held


# Pure, and called with a few constant tuples (each parser's markers): remembered.
@functools.cache
def _by_first_character(markers: tuple[str, ...]) -> tuple[tuple[str, int, tuple[str, ...]], ...]:
    """The markers grouped by their first character: (character, longest, markers)."""
    groups: dict[str, list[str]] = {}
    for marker in markers:
        if marker:
            groups.setdefault(marker[0], []).append(marker)
    return tuple((c, max(map(len, group)), tuple(group)) for c, group in groups.items())


def hold_back(text: str, markers: tuple[str, ...]) -> str:
    """``text`` minus its longest tail that is a proper prefix of one of ``markers``."""
    return text[: len(text) - held_length(text, markers)]
