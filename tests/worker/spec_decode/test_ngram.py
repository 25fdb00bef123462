"""The n-gram proposer against a plain reference of vLLM's rule: the longest suffix
n-gram (capped at max_n, at least min_n) at its earliest earlier occurrence."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from actorllm.worker.spec_decode.ngram import NgramProposer


def _reference(tokens: list[int], k: int, lo: int, hi: int) -> list[int]:
    n_tok = len(tokens)
    for n in range(min(hi, n_tok - 1), lo - 1, -1):
        suffix = tokens[n_tok - n :]
        for start in range(0, n_tok - n):
            if tokens[start : start + n] == suffix:
                return tokens[start + n : start + n + k]
    return []


@settings(max_examples=300, deadline=None)
@given(
    tokens=st.lists(st.integers(0, 3), min_size=0, max_size=40),
    k=st.integers(1, 5),
    lo=st.integers(1, 3),
    extra=st.integers(0, 3),
)
def test_matches_reference(tokens: list[int], k: int, lo: int, extra: int) -> None:
    p = NgramProposer(k, lo, lo + extra)
    got = p.propose_one(np.array(tokens, dtype=np.int64), max_drafts=k).tolist()
    assert got == _reference(tokens, k, lo, lo + extra)


def test_examples() -> None:
    p = NgramProposer(k=4, min_n=2, max_n=4)
    t = np.array([1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 1, 2, 3], dtype=np.int64)
    assert p.propose_one(t, 4).tolist() == [4, 5, 9, 1]  # "1 2 3" first at 0
    assert p.propose_one(t, 2).tolist() == [4, 5]
    assert p.propose_one(np.array([1, 2, 3, 4], dtype=np.int64), 4).tolist() == []
