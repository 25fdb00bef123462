"""Streaming text that may contain markers (``<tool_call>``, ``</think>``): hold back a tail
that could still turn into one, so no marker is ever half-sent as plain text.

    >>> hold_back("Let me check <tool", ("<tool_call>",))
    'Let me check '
"""

from __future__ import annotations


def hold_back(text: str, markers: tuple[str, ...]) -> str:
    """``text`` minus its longest tail that is a proper prefix of one of ``markers``."""
    cut = len(text)
    for marker in markers:
        for k in range(min(len(marker) - 1, len(text)), 0, -1):
            if text.endswith(marker[:k]):
                cut = min(cut, len(text) - k)
                break
    return text[:cut]
