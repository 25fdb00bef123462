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
of Arctic's ``SuffixTree`` (``csrc/suffix_decoding/suffix_tree.cc``); the difference: among
children of equal count the one that first reached that count leads (Arctic's order of
equal counts follows its sibling lists' updates).

Storage (Arctic's path compression): a ``_Node`` object holds a run of trie nodes, a
chain of positions with one child each and one count, as a slice ``seq[start : start +
length]`` of a token list (a held sequence where the run occurs, or a copy of the run
once that sequence goes). Counts are equal along a run and an occurrence that ends
somewhere makes its count exceed the next position's, so occurrences end at a run's last
token: a suffix being extended ends at a run, and each step is one of Arctic's cases
(``_step``: the run grows, a new child, a run takes one token from its only child, two
runs fuse, a child's first token splits off, or a count grows). Removal fuses a run with
its only child when their counts become equal, so runs stay maximal. Runs are O(tokens)
(Arctic keeps, per run, where sequences end in it to move its reference to a held
sequence; here a run outliving its sequence copies its tokens, at most ``max_depth``, 8
bytes each). Measured with tracemalloc, 20k random tokens at depth 24 (text that never
repeats, the worst case: one run per token) take ~180 bytes per token, 200 such
sequences of 300 tokens ~230 (a node object per token and depth took ~1.4 KB, and ~6.5
KB with a dict of children per node); a 50-token loop takes ~9 bytes per token.

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
    """A run of ``length`` tokens of the trie (Arctic's path compression): positions
    that have one child each and the same count, so a chain of one-child nodes is one
    object. Its tokens are ``seq[start : start + length]`` of a token list that is only
    ever appended to: a held sequence where the node's path occurs, or a copy of its own
    once that sequence is removed."""

    __slots__ = ("children", "count", "length", "parent", "seq", "start", "token")

    def __init__(
        self, token: int, parent: _Node | None, seq: list[int], start: int, length: int
    ) -> None:
        self.token = token  # the run's first token (-1: the root)
        self.count = 0  # occurrences of each of the run's paths across the sequences
        self.parent = parent  # None: the root
        self.seq = seq  # holds the run's tokens at [start, start + length)
        self.start = start
        self.length = length  # 0: the root
        # None: a leaf; a _Node: the one child (its .token says which); a dict
        # {first token: child} of two or more, in the order they were added.
        self.children: _Node | dict[int, _Node] | None = None

    def tokens(self) -> list[int]:
        return self.seq[self.start : self.start + self.length]


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
    num_nodes: int  # paths held, the root included: one-token trie nodes (walks the trie)
    num_runs: int  # the objects holding them, path-compressed (Arctic's nodes), root included


@final
class SuffixTree:
    """Sequences keyed by any hashable id; not thread-safe (the worker thread owns it)."""

    def __init__(self, max_depth: int) -> None:
        if max_depth < 1:
            raise ValueError(f"max_depth must be >= 1, got {max_depth}")
        self.max_depth = max_depth
        self._root = _Node(-1, None, [], 0, 0)
        self._seqs: dict[Hashable, list[int]] = {}  # {seq_id: its tokens}
        # {seq_id: nodes where its suffixes still shorter than max_depth end, oldest
        # first}: an occurrence ends at a run's last token (a run's tokens have one count)
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
            seq.append(tok)
            # A new suffix starts here; the oldest one (max_depth tokens long) drops out.
            active.append(root)
            root.count += 1
            # Longest first: a suffix's step changes counts only deeper than the
            # shorter suffixes still to step reach.
            for i, node in enumerate(active):
                active[i] = _step(root, node, tok, seq)

    def remove(self, seq_id: Hashable) -> None:
        """Forget sequence ``seq_id`` (KeyError if it is not held)."""
        seq = self._seqs.pop(seq_id)
        del self._active[seq_id]
        root = self._root
        for start in range(len(seq)):
            root.count -= 1
            node, idx, stop = root, start, min(start + self.max_depth, len(seq))
            while idx < stop:
                child = _child(node, seq[idx])
                assert child is not None
                child.count -= 1
                if child.count == 0:  # only this suffix went here: its subtree goes
                    _drop_child(node, child)
                    break
                if child.seq is seq:  # the run outlives its reference
                    child.seq, child.start = child.tokens(), 0
                idx += child.length
                node = child
            # an occurrence no longer ends here, or a child went: node and its one
            # child may have one count now, so one run
            _merge_into_child(node)

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
            at = self._locate(ctx[len(ctx) - m :])
            if at is None:  # no longer suffix of the context can match either
                break
            cap = min(max_spec_tokens, int(m * max_spec_factor + 1e-6))
            tokens, probs = _follow(*at, cap, min_token_prob)
            score = sum(probs)
            if score >= best.score:
                best = Draft(token_ids=tokens, probs=probs, score=score, match_len=m)
        return best

    def statistics(self) -> TreeStatistics:
        paths, runs, stack = 0, 0, [self._root]
        while stack:
            node = stack.pop()
            runs += 1
            paths += node.length
            children = node.children
            if isinstance(children, _Node):
                stack.append(children)
            elif children:
                stack.extend(children.values())
        return TreeStatistics(
            num_seqs=len(self._seqs),
            num_tokens=self._root.count,
            num_nodes=paths + 1,
            num_runs=runs,
        )

    def _find(self, path: list[int]) -> _Node | None:
        """The run holding ``path``'s last token (its count is the path's)."""
        at = self._locate(path)
        return None if at is None else at[0]

    def _locate(self, path: list[int]) -> tuple[_Node, int] | None:
        """Where ``path`` ends: a run and the offset of its token there."""
        node, off = self._root, -1
        for tok in path:
            if off < node.length - 1:  # inside a run: one way on
                if node.seq[node.start + off + 1] != tok:
                    return None
                off += 1
            else:
                child = _child(node, tok)
                if child is None:
                    return None
                node, off = child, 0
        return node, off


def _step(root: _Node, node: _Node, tok: int, seq: list[int]) -> _Node:
    """Extend the occurrence ending at ``node``'s last token with ``tok`` (``seq[-1]``,
    the occurrence's sequence); returns the run it ends at now. Arctic's cases."""
    end = len(seq)
    child = _child(node, tok)
    if child is None:
        if node.count == 1 and node is not root:  # only this occurrence: a leaf grows
            node.length += 1
            node.seq, node.start = seq, end - node.length
            return node
        new = _Node(tok, node, seq, end - 1, 1)
        new.count = 1
        _add_child(node, new)
        return new
    if node.count == child.count + 1 and node is not root:
        # Every other occurrence of node goes on with tok (it is node's only child):
        # tok's position joins node's run.
        if child.length == 1:  # node and child become one run (child: others end there)
            child.count += 1
            child.token, child.length = node.token, node.length + 1
            child.seq, child.start = seq, end - child.length
            assert node.parent is not None
            child.parent = node.parent
            _replace_child(node.parent, node, child)
            return child
        node.length += 1
        node.seq, node.start = seq, end - node.length
        child.start += 1
        child.length -= 1
        child.token = child.seq[child.start]
        return node
    if child.length > 1:  # tok's position gets a count of its own: split it off
        head = _Node(tok, node, seq, end - 1, 1)
        head.count = child.count
        _replace_child(node, child, head)
        child.start += 1
        child.length -= 1
        child.token = child.seq[child.start]
        child.parent = head
        head.children = child
        child = head
    child.count += 1
    return child


def _merge_into_child(node: _Node) -> None:
    """Fold ``node`` into its only child if they have one count (no occurrence ends at
    ``node``: no active suffix is there). The child object stays: suffixes may end there."""
    child = node.children
    if not isinstance(child, _Node) or child.count != node.count or node.parent is None:
        return
    head, tail = node.tokens(), child.tokens()
    if child.start >= node.length and child.seq[child.start - node.length : child.start] == head:
        child.start -= node.length
    elif node.seq[node.start + node.length : node.start + node.length + child.length] == tail:
        child.seq, child.start = node.seq, node.start
    else:
        child.seq, child.start = head + tail, 0
    child.token = node.token
    child.length += node.length
    child.parent = node.parent
    _replace_child(node.parent, node, child)


def _follow(
    node: _Node, off: int, cap: int, min_token_prob: float
) -> tuple[list[int], list[float]]:
    """The most frequent continuation from position ``off`` of ``node``: up to ``cap``
    tokens, each of probability at least ``min_token_prob``."""
    tokens: list[int] = []
    probs: list[float] = []
    prob = 1.0
    while len(tokens) < cap:
        if off < node.length - 1:  # inside a run: one child of the same count
            off += 1
            tok = node.seq[node.start + off]
        else:
            children = node.children
            if not children:
                break
            # max() keeps the first of equal counts: the child that reached the count first
            child = children if isinstance(children, _Node) else max(children.values(), key=_count)
            prob *= child.count / node.count
            node, off, tok = child, 0, child.token
        if prob < min_token_prob:
            break
        tokens.append(tok)
        probs.append(prob)
    return tokens, probs


def _count(node: _Node) -> int:
    return node.count


def _child(node: _Node, tok: int) -> _Node | None:
    """``node``'s child whose run starts with ``tok``, if it has one."""
    children = node.children
    if children is None:
        return None
    if isinstance(children, _Node):
        return children if children.token == tok else None
    return children.get(tok)


def _add_child(node: _Node, child: _Node) -> None:
    children = node.children
    if children is None:
        node.children = child
    elif isinstance(children, _Node):  # the old child stays first
        node.children = {children.token: children, child.token: child}
    else:
        children[child.token] = child


def _replace_child(node: _Node, old: _Node, new: _Node) -> None:
    """Put ``new`` (same first token) where ``old`` was among ``node``'s children."""
    if node.children is old:
        node.children = new
    else:
        assert isinstance(node.children, dict)
        node.children[new.token] = new


def _drop_child(node: _Node, child: _Node) -> None:
    """Unlink ``child``; a dict left with one child becomes that child."""
    children = node.children
    if children is child:
        node.children = None
    else:
        assert isinstance(children, dict)
        del children[child.token]
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
