"""vLLM's ``thinking_token_budget``: end a reasoning section once it is N tokens long.

Theory of operation: the state is read off the token ids, never kept. The thinking section
is what follows the last start marker of prompt + output, unless an end marker follows that
start. Its tokens are counted (the prompt's too, when the prompt opens the section); once
the count reaches the budget, the end marker is forced one token per step, and after the
whole marker has been written the model continues freely (its answer). Because nothing but
the token ids is read, a preempted request, a request replayed from the ledger after a crash
and a speculative row (its drafts read as outputs) all get the same answer. The worker
asks :class:`~actorllm.core.thinking_scan.ThinkingScan`, which reads each token once and
answers as :func:`forced_token` does (a cache of that answer, rebuilt from the tokens).

    >>> m = ThinkingMarkers(start=(1,), end=(2, 3))
    >>> forced_token([9, 1, 5, 6], m, budget=2)  # two thinking tokens: start the end marker
    2
    >>> forced_token([9, 1, 5, 6, 2], m, budget=2)  # then its next token
    3
    >>> forced_token([9, 1, 5, 6, 2, 3], m, budget=2) is None  # the section is closed
    True
    >>> forced_token([9, 1, 5], m, budget=2) is None  # one thinking token so far
    True
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec


class ThinkingMarkers(msgspec.Struct, frozen=True, kw_only=True):
    """The token ids that open and (forced when the budget runs out) close a reasoning
    section: the tokenized ``reasoning_start_str`` / ``reasoning_end_str``."""

    start: tuple[int, ...]
    end: tuple[int, ...]


def _open_section(tokens: Sequence[int], markers: ThinkingMarkers) -> int:
    """Where the open thinking section's first token is (just after the last start marker,
    with no end marker after it); -1: no section is open. One backward scan that stops at
    the first marker it meets, so an open section costs its own length."""
    start, end = markers.start, markers.end
    for i in range(len(tokens) - 1, -1, -1):
        t = tokens[i]
        if t == end[0] and tuple(tokens[i : i + len(end)]) == end:
            return -1  # closed (naturally, or by an earlier forcing)
        if t == start[0] and tuple(tokens[i : i + len(start)]) == start:
            return i + len(start)
    return -1


def forced_token(tokens: Sequence[int], markers: ThinkingMarkers, budget: int) -> int | None:
    """The token the next position must be (the next token of the end marker) for a request
    whose prompt + output so far is ``tokens`` and whose thinking budget is ``budget``
    (>= 0); None: sample freely (not thinking, or under budget)."""
    body = _open_section(tokens, markers)
    if body < 0:
        return None
    return forced_in_section(len(tokens) - body, budget, tokens, markers.end)


def forced_in_section(
    count: int, budget: int, tokens: Sequence[int], end: tuple[int, ...]
) -> int | None:
    """:func:`forced_token` of a history whose open section holds ``count`` tokens and
    ends with ``tokens`` (at least its last ``len(end) - 1``, or all of it)."""
    if count < budget:
        return None
    # The tail may already hold the first j tokens of the end marker (forced at the steps
    # before): they are not thinking tokens. The longest such j that leaves the budget's
    # worth of thinking before it says where in the marker this step is.
    for j in range(min(count - budget, len(end) - 1), 0, -1):
        if tuple(tokens[len(tokens) - j :]) == end[:j]:
            return end[j]
    return end[0]
