"""How many KV blocks a request can hold at once, and the longest request a pool holds."""

from __future__ import annotations


def blocks_for_one_request(
    max_model_len: int, block_size: int, chunk: int, windows: tuple[int | None, ...] = (None,)
) -> int:
    """The most blocks one request can hold at once, summed over the KV cache groups (one
    window per group, None: full attention): all of ``max_model_len`` for full attention,
    or with a sliding window the window behind its largest chunk plus the chunk (a chunk
    at position p holds positions ``[p - window + 1, p + chunk)``, over at most one block
    more than their count). ``chunk``: the largest prefill chunk (the step's token budget).

    >>> blocks_for_one_request(100, 16, 2048), blocks_for_one_request(100, 16, 16, (None, 8))
    (7, 10)
    """
    full = -(-max_model_len // block_size)
    chunk = min(chunk, max_model_len)
    return sum(
        full if w is None else min(full, -(-(w - 1 + chunk) // block_size) + 1) for w in windows
    )


def largest_model_len(
    usable_blocks: int, block_size: int, chunk: int, windows: tuple[int | None, ...] = (None,)
) -> int:
    """The largest ``max_model_len`` whose request fits in ``usable_blocks`` blocks (0:
    not even one token): what to tell a user whose KV cache is too small.

    >>> largest_model_len(10, 16, 2048), largest_model_len(10, 16, 2048, (None, None))
    (160, 80)
    """
    lo, hi = 0, usable_blocks * block_size  # a request of lo fits; one of hi + 1 does not
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if blocks_for_one_request(mid, block_size, chunk, windows) <= usable_blocks:
            lo = mid
        else:
            hi = mid - 1
    return lo
