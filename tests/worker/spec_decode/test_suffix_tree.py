"""The suffix trie: its counts against substring counting over the sequences held (through
appends and removals), and speculation's rules (the most frequent continuation, its
probabilities, min_token_prob, max_spec_factor, the depth, the best match)."""

from __future__ import annotations

import tracemalloc

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from actorllm.worker.spec_decode.suffix_tree import SuffixTree, speculate_tail


def _occurrences(seqs: list[list[int]], path: list[int]) -> int:
    m = len(path)
    return sum(s[i : i + m] == path for s in seqs for i in range(len(s) - m + 1))


def _count(tree: SuffixTree, path: list[int]) -> int:
    node = tree._find(path)
    return 0 if node is None else node.count


def _substrings(seqs: list[list[int]], depth: int) -> set[tuple[int, ...]]:
    return {
        tuple(s[i : i + m]) for s in seqs for i in range(len(s))
        for m in range(1, min(depth, len(s) - i) + 1)
    }  # fmt: skip


seqs_st = st.lists(st.lists(st.integers(0, 3), max_size=25), min_size=1, max_size=4)


@settings(max_examples=150, deadline=None)
@given(seqs=seqs_st, depth=st.integers(1, 6), removed=st.sets(st.integers(0, 3)), split=st.data())
def test_counts_are_occurrences(seqs, depth, removed, split) -> None:
    """Every path's count is its number of occurrences (substrings up to ``depth``), built
    in pieces, and after removing some sequences; nothing longer than ``depth`` is held and
    a removed sequence leaves no node behind."""
    tree = SuffixTree(depth)
    for i, s in enumerate(seqs):
        cut = split.draw(st.integers(0, len(s)))
        tree.extend(i, s[:cut])
        tree.extend(i, s[cut:])
    kept = [s for i, s in enumerate(seqs) if i not in removed]
    for i in removed:
        tree.discard(i)
    assert tree.num_tokens == sum(map(len, kept))
    held = _substrings(kept, depth)
    for path in held:
        assert _count(tree, list(path)) == _occurrences(kept, list(path))
    # one node per distinct path, plus the root: nothing stale, nothing deeper than depth
    assert tree.statistics().num_nodes == len(held) + 1


@settings(max_examples=150, deadline=None)
@given(seqs=seqs_st, context=st.lists(st.integers(0, 3), max_size=10), depth=st.integers(2, 8),
       cap=st.integers(0, 6), factor=st.sampled_from([0.5, 1.0, 2.0]),
       min_prob=st.sampled_from([0.0, 0.1, 0.5]))  # fmt: skip
def test_a_draft_follows_the_rules(seqs, context, depth, cap, factor, min_prob) -> None:
    """Each draft token is a most frequent continuation of the path so far, its probability
    the product of count ratios, at least min_prob; the draft is capped by cap, by
    factor * match and by the depth; no other match length scores higher."""
    tree = SuffixTree(depth)
    for i, s in enumerate(seqs):
        tree.extend(i, s)
    d = tree.speculate(context, cap, factor, min_prob)
    ctx = context[-depth:]
    path = ctx[len(ctx) - d.match_len :]
    assert len(d.token_ids) <= min(cap, int(d.match_len * factor + 1e-6), depth - d.match_len)
    prob = 1.0
    for tok, p in zip(d.token_ids, d.probs, strict=True):
        best = max(_count(tree, [*path, t]) for t in range(4))
        assert _count(tree, [*path, tok]) == best
        prob *= best / _count(tree, path)
        assert abs(p - prob) < 1e-9 and p >= min_prob
        path = [*path, tok]
    assert abs(d.score - sum(d.probs)) < 1e-9
    for m in range(1, len(ctx)):
        if _count(tree, ctx[len(ctx) - m :]) == 0:
            break
        assert d.score >= _best_score_at(tree, ctx[len(ctx) - m :], cap, factor, min_prob) - 1e-9


def _best_score_at(tree: SuffixTree, path: list[int], cap: int, factor: float, p_min: float):
    """The score of a most-frequent walk from ``path`` whatever child a tie picks: the
    lowest over the tied children (the tree keeps one child per tie, as Arctic's does, so
    its own walk from ``path`` scores at least this)."""
    limit = min(cap, int(len(path) * factor + 1e-6), tree.max_depth - len(path))

    def walk(path: list[int], prob: float, left: int) -> float:
        if left == 0:
            return 0.0
        counts = {t: _count(tree, [*path, t]) for t in range(4)}
        best = max(counts.values())
        if best == 0 or prob * best / _count(tree, path) < p_min:
            return 0.0
        q = prob * best / _count(tree, path)
        return min(q + walk([*path, t], q, left - 1) for t, c in counts.items() if c == best)

    return walk(path, 1.0, limit)


def test_most_frequent_continuation_and_pruning() -> None:
    tree = SuffixTree(8)
    # after "1 2": 3 three times, 4 once, and the sequence's end once
    tree.extend("a", [1, 2, 3, 1, 2, 3, 1, 2, 4, 1, 2, 3, 9, 1, 2])
    d = tree.speculate([7, 1, 2], max_spec_tokens=3, max_spec_factor=2.0, min_token_prob=0.1)
    assert d.match_len == 2 and d.token_ids[0] == 3 and abs(d.probs[0] - 3 / 5) < 1e-9
    # "1 2 3" goes on with 1 twice and 9 once: 3/5 * 2/3
    assert d.token_ids[:2] == [3, 1] and abs(d.probs[1] - 0.4) < 1e-9
    strict = tree.speculate([7, 1, 2], max_spec_tokens=3, max_spec_factor=2.0, min_token_prob=0.5)
    assert strict.token_ids == [3]  # 0.4 < 0.5: the walk stops before the second token


def test_spec_factor_caps_a_short_match() -> None:
    tree = SuffixTree(16)
    tree.extend("a", [1, 2, 3, 4, 5, 6, 7, 8])
    d = tree.speculate([9, 9, 3], max_spec_tokens=8, max_spec_factor=1.0, min_token_prob=0.1)
    assert (d.match_len, d.token_ids) == (1, [4])  # one matched token: one draft token
    d = tree.speculate([9, 9, 3], max_spec_tokens=8, max_spec_factor=3.0, min_token_prob=0.1)
    assert d.token_ids == [4, 5, 6]
    d = tree.speculate([9, 9, 3], max_spec_tokens=2, max_spec_factor=3.0, min_token_prob=0.1)
    assert d.token_ids == [4, 5]
    assert tree.speculate([9, 9, 3], 8, 0.0, 0.1).token_ids == []  # factor 0: no drafts


def test_depth_bounds_match_plus_draft() -> None:
    tree = SuffixTree(4)
    tree.extend("a", [1, 2, 3, 4, 5, 6])
    d = tree.speculate([0, 1, 2], max_spec_tokens=8, max_spec_factor=4.0, min_token_prob=0.0)
    # "2" drafts 3 more (depth 4), "1 2" only 2: the shorter match scores higher
    assert (d.match_len, d.token_ids) == (1, [3, 4, 5])
    d = tree.speculate([0, 1, 2], max_spec_tokens=2, max_spec_factor=4.0, min_token_prob=0.0)
    assert (d.match_len, d.token_ids) == (2, [3, 4])  # equal scores: the longer match
    # the context is read to its last `depth` tokens, and a match is shorter than it
    assert tree.speculate([1, 2], 8, 4.0, 0.0).match_len == 1


def test_removal_frees_nodes() -> None:
    tree = SuffixTree(6)
    tree.extend("a", [1, 2, 3, 4])
    tree.extend("b", [1, 2, 3, 5])
    before = tree.statistics().num_nodes
    tree.remove("b")
    after = tree.statistics()
    assert after.num_seqs == 1 and after.num_tokens == 4 and after.num_nodes < before
    tree.remove("a")
    assert tree.statistics().num_nodes == 1 and len(tree) == 0
    assert tree.speculate([1, 2], 4, 1.0, 0.1).token_ids == []


@settings(max_examples=300, deadline=None)
@given(seq=st.lists(st.integers(0, 3), max_size=40), depth=st.integers(1, 8),
       cap=st.integers(0, 8), factor=st.sampled_from([0.5, 1.0, 3.0]),
       min_prob=st.sampled_from([0.0, 0.1, 0.4]))  # fmt: skip
def test_a_row_drafts_as_its_trie(seq, depth, cap, factor, min_prob) -> None:
    """speculate_tail (numpy over the row, no state) drafts what the row's trie drafts."""
    tree = SuffixTree(depth)
    tree.extend(0, seq)
    want = tree.speculate(seq, cap, factor, min_prob)
    got = speculate_tail(np.array(seq, dtype=np.int64), depth, cap, factor, min_prob)
    assert (got.token_ids, got.probs, got.score) == (want.token_ids, want.probs, want.score)


def test_memory_per_token_of_text_that_does_not_repeat() -> None:
    """Text that never repeats is the trie's worst case (a chain of ``depth`` nodes per
    token): path-compressed, one run per token, ~160 bytes per token at depth 24 (a node
    object per token and depth was ~1.4 KB, with a dict each ~6.5 KB)."""
    rng = np.random.default_rng(0)
    tokens = rng.choice(150_000, size=5000, replace=False).tolist()  # no token repeats
    tracemalloc.start()
    try:
        tree = SuffixTree(24)
        tree.extend("a", tokens)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert tree.num_tokens == 5000
    assert held / 5000 < 400  # bytes per token
    assert tree.statistics().num_runs == 5001  # the root and one run per token


@settings(max_examples=150, deadline=None)
@given(seqs=seqs_st, depth=st.integers(1, 6), removed=st.sets(st.integers(0, 3)), more=st.data())
def test_runs_stay_maximal(seqs, depth, removed, more) -> None:
    """Path compression: a run ends exactly where a path has other than one child or its
    child has a smaller count (through appends, removals and appends after them), and no
    run keeps a removed sequence's tokens alive."""
    tree = SuffixTree(depth)
    for i, s in enumerate(seqs):
        tree.extend(i, s)
    gone = [tree._seqs[i] for i in removed if i in tree]
    for i in removed:
        tree.discard(i)
    for i in range(len(seqs)):
        tree.extend(i, more.draw(st.lists(st.integers(0, 3), max_size=6)))
    held = list(tree._seqs.values())
    paths = _substrings(held, depth)
    kids = {p: [q for q in paths if q[:-1] == p] for p in paths}

    def starts_run(p: tuple[int, ...]) -> bool:
        up = p[:-1]
        return (
            not up
            or len(kids[up]) != 1
            or _occurrences(held, list(up)) != _occurrences(held, list(p))
        )

    starts = [p for p in paths if starts_run(p)]
    assert tree.statistics().num_runs == len(starts) + 1
    stack = [tree._root]
    while stack:
        node = stack.pop()
        assert not any(node.seq is s for s in gone)
        children = node.children
        if isinstance(children, dict):
            stack.extend(children.values())
        elif children is not None:
            stack.append(children)
