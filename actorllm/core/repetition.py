"""vLLM's ``repetition_detection``: stop a request whose output ends in an N-gram repeated
``min_count`` times in a row (vLLM's ``RepetitionDetectionParams`` and its check, same
fields, same rule, same errors).

    >>> p = RepetitionDetectionParams(max_pattern_size=3, min_count=3)
    >>> has_repetition([9, 1, 2, 1, 2, 1, 2], p)
    True
    >>> has_repetition([1, 2, 3, 1, 2, 4], p)
    False
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec


class RepetitionDetectionParams(msgspec.Struct, kw_only=True):
    """Detect repetitive N-gram patterns at the end of the output (vLLM's fields).

    Rule: sizes >= 0, min_pattern_size <= max_pattern_size, and min_count >= 2 when
    max_pattern_size > 0 (max_pattern_size 0: off).
    """

    # Largest N-gram checked; 0 disables detection. Needs min_count >= 2.
    max_pattern_size: int = 0
    # Smallest N-gram checked; 0 means 1. At most max_pattern_size.
    min_pattern_size: int = 0
    # How many consecutive repeats of the pattern end the request (>= 2).
    min_count: int = 0

    def __post_init__(self) -> None:
        if (
            self.max_pattern_size < 0
            or self.min_pattern_size < 0
            or self.min_pattern_size > self.max_pattern_size
        ):
            raise ValueError(
                "max_pattern_size, min_pattern_size must be >=0, "
                "with min_pattern_size <= max_pattern_size. "
                "Set both to 0 to disable repetitive pattern detection."
            )
        if self.max_pattern_size > 0 and self.min_count < 2:
            raise ValueError(
                "min_count must be >= 2 to detect repetitive patterns "
                "in engine output. If you do not wish to detect repetitive "
                "patterns, set max_pattern_size to 0."
            )


def _repeats(token_ids: Sequence[int], size: int, count: int) -> bool:
    """Whether the last ``size`` tokens equal each of the ``count - 1`` blocks before them."""
    for n in range(1, size + 1):
        target = token_ids[-n]
        for m in range(1, count):
            if token_ids[-(size * m + n)] != target:
                return False
    return True


def has_repetition(token_ids: Sequence[int], params: RepetitionDetectionParams) -> bool:
    """vLLM's ``check_sequence_repetition``: some pattern size in
    [min_pattern_size or 1, max_pattern_size] repeats ``min_count`` times at the end."""
    lo = params.min_pattern_size if params.min_pattern_size > 0 else 1
    hi, count = params.max_pattern_size, params.min_count
    if hi <= 0 or count < 2 or lo > hi:
        return False
    for size in range(lo, hi + 1):
        if size * count > len(token_ids):
            return False
        if _repeats(token_ids, size, count):
            return True
    return False
