"""The thinking budget's answer read incrementally: :func:`~.thinking_budget.forced_token`
in O(new tokens) per step instead of a scan over the open section.

Theory of operation: the backward scan finds the marker (start or end) that starts last
in the history, a complete match, the end marker first where both start at one place.
Read forward, that is the last complete match seen so far, by where it starts: each token
fed completes at most one match of each marker (the one ending at it), found in the last
few tokens, which :class:`ThinkingScan` keeps. So a scan holds only what the token ids
say about their own prefix: how many it has read (``length``), where its last marker
starts and which one it is, and its last few tokens. It is a cache, never the truth: fed
a history's tokens in any pieces, it answers as the full scan does, and a history shorter
than what it read (a request rebuilt, a slot reused) is read again from its start
(:meth:`ThinkingScan.resume`). Drafts (a speculative row's tail) are read on a copy,
never kept, so a rejected draft leaves nothing behind.

    >>> from actorllm.core.thinking_budget import ThinkingMarkers
    >>> scan = ThinkingScan(ThinkingMarkers(start=(1,), end=(2, 3)))
    >>> scan.feed([9, 1, 5])
    >>> scan.forced(budget=2) is None, scan.forced([6], budget=2)
    (True, 2)
    >>> scan.feed([6, 2]); scan.forced(budget=2)
    3
    >>> scan.resume(2), scan.length  # the history is 2 tokens now: read it again
    (0, 0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

from actorllm.core.thinking_budget import ThinkingMarkers, forced_in_section


@final
class ThinkingScan:
    """What a request's prompt + outputs, fed in order, say about its thinking section."""

    def __init__(self, markers: ThinkingMarkers) -> None:
        self.markers = markers
        # Enough of the last tokens to hold any marker ending at the next one.
        self._keep = max(len(markers.start), len(markers.end))
        self.length = 0  # tokens fed: a prefix of the request's history
        self._recent: list[int] = []  # the last ``_keep`` of them (all, if fewer)
        # Where the last complete marker fed starts (-1: none), and whether it is the end.
        self._last = (-1, False)

    def reset(self) -> None:
        self.length, self._recent, self._last = 0, [], (-1, False)

    def resume(self, known: int) -> int:
        """Where to feed from, for a history whose first ``known`` tokens will not change:
        what was read so far, or 0 (read again) where the history is shorter than that."""
        if known < self.length:
            self.reset()
        return self.length

    def feed(self, tokens: Sequence[int]) -> None:
        """Read the history's next ``tokens``."""
        window = [*self._recent, *tokens]
        self._last = self._advance(window, len(self._recent), self._last)
        self.length += len(tokens)
        self._recent = window[-self._keep :]

    def forced(self, tail: Sequence[int] = (), budget: int = 0) -> int | None:
        """:func:`~.thinking_budget.forced_token` of the tokens fed, then ``tail`` (read
        here, not kept: a speculative row's drafts)."""
        window = [*self._recent, *tail]
        start, is_end = self._advance(window, len(self._recent), self._last) if tail else self._last
        if start < 0 or is_end:
            return None
        count = self.length + len(tail) - (start + len(self.markers.start))
        return forced_in_section(count, budget, window, self.markers.end)

    def _advance(self, window: list[int], first: int, last: tuple[int, bool]) -> tuple[int, bool]:
        """``last`` after the tokens of ``window`` from index ``first`` on, ``window``
        being the history's tokens from ``self.length - first``."""
        pos, is_end = last
        offset = self.length - first  # the history's index of window[0]
        markers = ((self.markers.start, False), (self.markers.end, True))
        for stop in range(first + 1, len(window) + 1):
            for marker, closes in markers:
                at = stop - len(marker)
                if at < 0 or window[stop - 1] != marker[-1]:
                    continue
                if tuple(window[at:stop]) != marker:
                    continue
                # The backward scan meets the later start first, the end at a tie.
                if offset + at > pos or (offset + at == pos and closes):
                    pos, is_end = offset + at, closes
        return pos, is_end
