"""A depth-limited suffix trie with occurrence counts: the index behind suffix decoding
(``suffix.py``; Snowflake's Arctic suffix decoding, https://arxiv.org/abs/2411.04975).

Theory of operation: the trie holds every substring of at most ``max_depth`` tokens of
the sequences added to it. A node is a path from the root (a substring ``P``); its
``count`` is how many times ``P`` occurs across the sequences (so the root's count is the
number of tokens held). Appending a token to a sequence extends the (at most
``max_depth``) suffixes of it that are still shorter than ``max_depth``: each of their
end nodes steps into its child for the token, whose count grows by one. Removing a
sequence walks each of its suffixes again and takes one off every count; a node whose
count reaches zero goes, with its subtree (every count below it is zero then too).

Speculation from a context ``c``: for every match length ``m`` (1, 2, ... while the last
``m`` tokens of ``c`` are a path of the trie), follow the most frequent child from the
node of ``c[-m:]``; each token's probability is the product of ``child / parent`` counts
along the way (an occurrence that ends at a node, with no continuation, counts against
every child). The walk stops at ``max_spec_tokens``, at ``max_spec_factor * m`` tokens,
below ``min_token_prob``, or where the trie ends (paths hold at most ``max_depth``
tokens: the match and the draft share that depth). The draft kept is the one whose
probabilities sum highest (the longer match on a tie). These are the counts and the rule
of Arctic's ``SuffixTree`` (``csrc/suffix_decoding/suffix_tree.cc``); differences: nodes
here hold one token each (Arctic compresses single-child chains into one node, so its
memory is O(tokens) where this is O(tokens * max_depth) at worst), and among children of
equal count the one that first reached that count leads (Arctic's order of equal
counts follows its sibling lists' updates).

Memory: text that never repeats is the worst case, a chain of ``max_depth`` one-child
nodes per token. A single child is held as the node itself (a dict only from two
children on), so a node is one 56-byte object: measured with tracemalloc over 20k random
tokens at depth 24, ~1.4 KB per token (a dict per node was ~6.5 KB); text that repeats
costs far less (14 bytes per token for a 50-token loop).

Pure Python, no I/O:

    >>> t = SuffixTree(max_depth=8)
    >>> t.extend("a", [1, 2, 3, 1, 2, 3, 1, 2])
    >>> d = t.speculate([3, 1, 2], max_spec_tokens=4, max_spec_factor=2.0, min_token_prob=0.1)
    >>> d.token_ids, d.match_len
    ([3, 1, 2, 3], 2)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from typing import final

import msgspec
import numpy as np


@final
class _Node:
    __slots__ = ("children", "count", "token")

    def __init__(self, token: int) -> None:
        self.token = token  # the last token of this node's path (-1: the root)
        self.count = 0  # occurrences of this node's path across the sequences
        # None: a leaf; a _Node: the one child (its .token says which); a dict
        # {token: child} of two or more, in the order they were added. Most nodes of a
        # trie over text that does not repeat have one child: a dict each would cost
        # ~180 bytes more per node.
        self.children: _Node | dict[int, _Node] | None = None


class Draft(msgspec.Struct, frozen=True, kw_only=True):
    """A speculation: ``token_ids`` with their estimated probabilities ``probs``,
    ``score = sum(probs)``, from a context match of ``match_len`` tokens."""

    token_ids: list[int] = msgspec.field(default_factory=list)
    probs: list[float] = msgspec.field(default_factory=list)
    score: float = 0.0
    match_len: int = 0


class TreeStatistics(msgspec.Struct, frozen=True, kw_only=True):
    num_seqs: int  # sequences held
    num_tokens: int  # their tokens (the root's count)
    num_nodes: int  # trie nodes, the root included (walks the trie: for tests and debugging)


@final
class SuffixTree:
    """Sequences keyed by any hashable id; not thread-safe (the worker thread owns it)."""

    def __init__(self, max_depth: int) -> None:
        if max_depth < 1:
            raise ValueError(f"max_depth must be >= 1, got {max_depth}")
        self.max_depth = max_depth
        self._root = _Node(-1)
        self._seqs: dict[Hashable, list[int]] = {}  # {seq_id: its tokens}
        # {seq_id: end nodes of its suffixes still shorter than max_depth, oldest first}
        self._active: dict[Hashable, deque[_Node]] = {}

    def __contains__(self, seq_id: Hashable) -> bool:
        return seq_id in self._seqs

    def __len__(self) -> int:
        return len(self._seqs)

    @property
    def num_tokens(self) -> int:
        """The tokens held, over every sequence."""
        return self._root.count

    def discard(self, seq_id: Hashable) -> None:
        """:meth:`remove` if ``seq_id`` is held."""
        if seq_id in self._seqs:
            self.remove(seq_id)

    def extend(self, seq_id: Hashable, tokens: Sequence[int]) -> None:
        """Append ``tokens`` to sequence ``seq_id`` (a new one if it is not held).
        O(len(tokens) * max_depth)."""
        seq = self._seqs.setdefault(seq_id, [])
        active = self._active.setdefault(seq_id, deque(maxlen=self.max_depth))
        root = self._root
        for tok in tokens:
            tok = int(tok)
            # A new suffix starts here; the oldest one (max_depth tokens long) drops out.
            active.append(root)
            root.count += 1
            for i, node in enumerate(active):
                child = _child(node, tok)
                if child is None:
                    child = _Node(tok)
                    children = node.children
                    if children is None:
                        node.children = child
                    elif isinstance(children, _Node):  # the old child stays first
                        node.children = {children.token: children, tok: child}
                    else:
                        children[tok] = child
                child.count += 1
                active[i] = child
            seq.append(tok)

    def remove(self, seq_id: Hashable) -> None:
        """Forget sequence ``seq_id`` (KeyError if it is not held)."""
        seq = self._seqs.pop(seq_id)
        del self._active[seq_id]
        root = self._root
        for start in range(len(seq)):
            root.count -= 1
            node = root
            for tok in seq[start : start + self.max_depth]:
                child = _child(node, tok)
                assert child is not None
                child.count -= 1
                if child.count == 0:  # only this suffix went here: its subtree goes
                    _drop_child(node, tok)
                    break
                node = child

    def speculate(
        self,
        context: Sequence[int],
        max_spec_tokens: int,
        max_spec_factor: float,
        min_token_prob: float,
    ) -> Draft:
        """The best draft after ``context`` (its last ``max_depth`` tokens are read;
        matches are at most ``len(context) - 1`` tokens long, as Arctic's)."""
        ctx = [int(t) for t in context[-self.max_depth :]]
        best = Draft()
        for m in range(1, len(ctx)):
            node = self._find(ctx[len(ctx) - m :])
            if node is None:  # no longer suffix of the context can match either
                break
            cap = min(max_spec_tokens, int(m * max_spec_factor + 1e-6))
            tokens, probs = _follow(node, cap, min_token_prob)
            score = sum(probs)
            if score >= best.score:
                best = Draft(token_ids=tokens, probs=probs, score=score, match_len=m)
        return best

    def statistics(self) -> TreeStatistics:
        nodes, stack = 0, [self._root]
        while stack:
            node = stack.pop()
            nodes += 1
            children = node.children
            if isinstance(children, _Node):
                stack.append(children)
            elif children:
                stack.extend(children.values())
        return TreeStatistics(
            num_seqs=len(self._seqs), num_tokens=self._root.count, num_nodes=nodes
        )

    def _find(self, path: list[int]) -> _Node | None:
        node = self._root
        for tok in path:
            child = _child(node, tok)
            if child is None:
                return None
            node = child
        return node


def _follow(node: _Node, cap: int, min_token_prob: float) -> tuple[list[int], list[float]]:
    """The most frequent continuation from ``node``: up to ``cap`` tokens, each of
    probability at least ``min_token_prob``."""
    tokens: list[int] = []
    probs: list[float] = []
    prob = 1.0
    while len(tokens) < cap and node.children:
        children = node.children
        # max() keeps the first of equal counts: the child that reached the count first
        child = children if isinstance(children, _Node) else max(children.values(), key=_count)
        prob *= child.count / node.count
        if prob < min_token_prob:
            break
        tokens.append(child.token)
        probs.append(prob)
        node = child
    return tokens, probs


def _count(node: _Node) -> int:
    return node.count


def _child(node: _Node, tok: int) -> _Node | None:
    """``node``'s child for ``tok``, if it has one."""
    children = node.children
    if children is None:
        return None
    if isinstance(children, _Node):
        return children if children.token == tok else None
    return children.get(tok)


def _drop_child(node: _Node, tok: int) -> None:
    """Unlink ``node``'s child for ``tok``; a dict left with one child becomes that child."""
    children = node.children
    if isinstance(children, _Node):
        node.children = None
    else:
        assert children is not None
        del children[tok]
        if len(children) == 1:
            node.children = next(iter(children.values()))


def speculate_tail(
    seq: np.ndarray,
    max_depth: int,
    max_spec_tokens: int,
    max_spec_factor: float,
    min_token_prob: float,
) -> Draft:
    """The draft a :class:`SuffixTree` of ``max_depth`` holding only ``seq`` ([L] int64)
    gives after ``seq``'s own last tokens (the same tokens, probabilities and score; the
    ``match_len`` of an empty draft may differ), computed from ``seq`` with numpy and no
    trie: a request's own tokens need no state kept between steps.

    ``run[e]`` (how many tokens ending at ``e`` equal the tokens ending at ``L - 1``,
    capped) is built from shifted comparisons of the whole row, as the n-gram proposer
    does; the occurrences of a match of length ``m`` are the ends with ``run >= m`` (the
    row's own end among them: an occurrence with no continuation, as in the trie). A walk
    keeps the ends of the path so far; a trie's first-added child is here the continuation
    whose first occurrence comes first."""
    n = len(seq)
    longest = min(max_depth, n) - 1  # matches are shorter than the context, as the trie's
    best = Draft()
    if longest < 1:
        return best
    still = seq == seq[-1]  # [L] bool: t[e - j] == t[L - 1 - j] for every j so far
    run = still.astype(np.int32)  # [L] matched length ending at e, capped at `longest`
    for j in range(1, longest):
        shifted = np.zeros(n, dtype=bool)
        shifted[j:] = seq[: n - j] == seq[n - 1 - j]
        still &= shifted
        if not still[:-1].any():  # only the row's own end goes on: nothing longer drafts
            break
        run += still
    # Only matches that occur before the row's own end draft anything. The best draft has
    # the highest score, the longer match on a tie (the trie's ascending ">="); a match of
    # length m scores at most its cap, so the longest caps go first and the rest are
    # skipped once they cannot win.
    caps = {
        m: min(max_spec_tokens, int(m * max_spec_factor + 1e-6), max_depth - m)
        for m in range(1, int(run[:-1].max(initial=0)) + 1)
    }
    for m in sorted(caps, key=lambda m: (caps[m], m), reverse=True):
        if caps[m] < best.score or (caps[m] == best.score and m < best.match_len):
            continue
        tokens, probs = _follow_row(seq, np.flatnonzero(run >= m), caps[m], min_token_prob)
        score = sum(probs)
        if (score, m) > (best.score, best.match_len):
            best = Draft(token_ids=tokens, probs=probs, score=score, match_len=m)
    return best


def _follow_row(
    seq: np.ndarray, ends: np.ndarray, cap: int, min_token_prob: float
) -> tuple[list[int], list[float]]:
    """:func:`_follow` over the occurrences ``ends`` ([K] ascending) of a path in ``seq``."""
    tokens: list[int] = []
    probs: list[float] = []
    prob = 1.0
    n = len(seq)
    while len(tokens) < cap:
        nxt = ends[ends < n - 1] + 1  # [K'] where each occurrence goes on, ascending
        if len(nxt) == 0:
            break
        vals = seq[nxt]
        same = vals == vals[0]
        if same.all():  # one continuation (repeated text): no counting needed
            tok, count = int(vals[0]), len(vals)
        else:
            uniq, first, counts = np.unique(vals, return_index=True, return_counts=True)
            top = np.flatnonzero(counts == counts.max())
            pick = int(top[np.argmin(first[top])])  # of equal counts: the first to occur
            tok, count = int(uniq[pick]), int(counts[pick])
            same = vals == tok
        prob *= count / len(ends)
        if prob < min_token_prob:
            break
        tokens.append(tok)
        probs.append(prob)
        ends = nxt[same]
    return tokens, probs
