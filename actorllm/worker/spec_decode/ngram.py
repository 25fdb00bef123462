"""Prompt-lookup drafts (vLLM's ``ngram`` method), on the host, vectorised with numpy.

For a request whose tokens (prompt + outputs) are ``t[0..L)``: find the longest n in
``[prompt_lookup_min, prompt_lookup_max]`` such that the last n tokens occur earlier in
``t``; the draft is the (up to) k tokens that followed the earliest such occurrence.
vLLM's proposer (a capped KMP over the reversed tokens) picks the same match: the longest
suffix n-gram, capped at ``prompt_lookup_max``, at its earliest position.

Vectorised: ``run[e]`` (how many tokens ending at ``e`` equal the tokens ending at
``L - 1``, capped) is built from ``prompt_lookup_max`` shifted comparisons of the whole
row, ``O(L * max)`` work in numpy instead of a Python loop per token.

    >>> p = NgramProposer(k=3, min_n=2, max_n=3)
    >>> p.propose_one(np.array([5, 6, 7, 8, 9, 5, 6]), max_drafts=3).tolist()
    [7, 8, 9]
"""

from __future__ import annotations

from typing import final

import numpy as np


@final
class NgramProposer:
    """Stateless: drafts are a pure function of a request's tokens (so a request replayed
    from the ledger gets the same drafts)."""

    def __init__(self, k: int, min_n: int, max_n: int) -> None:
        if not 1 <= min_n <= max_n or k < 1:
            raise ValueError(f"need 1 <= min_n <= max_n and k >= 1, got {min_n}, {max_n}, {k}")
        self.k = k
        self.min_n = min_n
        self.max_n = max_n

    def propose_one(self, tokens: np.ndarray, max_drafts: int) -> np.ndarray:
        """[<= min(k, max_drafts)] int64 drafts after ``tokens`` ([L] int64); empty when no
        n-gram of at least ``min_n`` tokens matches."""
        k = min(self.k, max_drafts)
        n_tok = len(tokens)
        if k <= 0 or n_tok <= self.min_n:
            return tokens[:0]
        max_n = min(self.max_n, n_tok - 1)
        ends = n_tok - 1  # candidate occurrence ends e in [0, L - 1): before the suffix itself
        # still[e]: tokens t[e - j] == t[L - 1 - j] for every j so far (run length > j).
        still = tokens[:ends] == tokens[-1]  # [E] bool
        run = still.astype(np.int32)  # [E] matched length, capped at max_n
        for j in range(1, max_n):
            # t[e - j] exists for e >= j; shorter prefixes stop matching.
            shifted = np.zeros(ends, dtype=bool)
            shifted[j:] = tokens[: ends - j] == tokens[-1 - j]
            still &= shifted
            if not still.any():
                break
            run += still
        best = int(run.max(initial=0))
        if best < self.min_n:
            return tokens[:0]
        first = int(np.argmax(run == best))  # the earliest end with the longest match
        return tokens[first + 1 : first + 1 + k]
