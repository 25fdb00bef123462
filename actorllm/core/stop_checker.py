"""Stop strings: find them in streamed text, truncate exactly, never emit half of one.

Theory of operation: the output text only grows (until a stop string ends it), and every
character before ``new_start`` was searched by an earlier call. A match that ends before
``new_start`` would have been found then, so each call searches only the new characters
plus ``len(stop) - 1`` characters before them: O(new text) per step, whatever the length of
the output.

Which stop string wins: the one *completed first* in the text (the smallest end position),
so the result does not depend on how the text was cut into deltas. When two stop strings
complete at the same character (one is a suffix of the other, e.g. ``"end"`` and
``"the end"``), the longest wins, so no part of it is left in the text. With
``["abc", "b"]`` and text ``"xabc"``, ``"b"`` completes first: the text is ``"xa"``.

Holding back: while a request streams, the last ``len(longest stop) - 1`` characters are not
emitted, because they may be the beginning of a stop string whose end has not arrived yet.
With ``include_stop_str_in_output`` nothing needs holding back: the text is then cut at the
*end* of the stop string, never before text already emitted.

    >>> checker = StopChecker(["STOP"], include_in_output=False)
    >>> checker.hold_back
    3
    >>> checker.check("Hello ST", new_start=0) is None
    True
    >>> checker.check("Hello STOP now", new_start=8)
    StopMatch(stop='STOP', truncate_to=6)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, final


class StopMatch(NamedTuple):
    stop: str  # the stop string found (vLLM's stop_reason)
    truncate_to: int  # keep text[:truncate_to]


@final
class StopChecker:
    """Stop-string search for one request; stateless between calls (the caller owns the
    text and says where the new part starts)."""

    def __init__(self, stop: Sequence[str], *, include_in_output: bool) -> None:
        if any(not s for s in stop):
            raise ValueError("stop strings must not be empty")
        # Longest first: on equal end positions the longest match wins (see module doc).
        self._stops = sorted(set(stop), key=len, reverse=True)
        self._include = include_in_output
        longest = len(self._stops[0]) if self._stops else 0
        self.longest = longest  # characters of the longest stop string
        self.hold_back = 0 if include_in_output or not longest else longest - 1

    def __bool__(self) -> bool:
        return bool(self._stops)

    def check(self, text: str, new_start: int) -> StopMatch | None:
        """The first stop string completed in ``text[new_start:]``, or None.

        ``new_start`` is where the characters not yet searched begin; a stop string may
        start before it (split across deltas) but must end after it.
        """
        if new_start >= len(text):
            return None
        best: tuple[int, str, int] | None = None  # (end, stop, start)
        for stop in self._stops:
            start = text.find(stop, max(0, new_start - len(stop) + 1))
            if start < 0:
                continue
            end = start + len(stop)
            # Strict '<': among equal ends the earlier (longer, sorted first) one stays.
            if best is None or end < best[0]:
                best = (end, stop, start)
        if best is None:
            return None
        end, stop, start = best
        return StopMatch(stop, end if self._include else start)

    def visible_len(self, text_len: int, finished: bool) -> int:
        """How much of a text of ``text_len`` characters may be shown to the caller now."""
        if finished:
            return text_len
        return max(0, text_len - self.hold_back)
