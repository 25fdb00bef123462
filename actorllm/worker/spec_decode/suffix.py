"""Suffix decoding (vLLM's ``method: "suffix"``, Snowflake's Arctic suffix decoding), on
the host, in Python: drafts from suffix tries (``suffix_tree.py``) over the request's own
tokens and over the outputs of past requests.

Theory of operation, as vLLM's ``SuffixDecodingProposer`` drives Arctic's
``SuffixDecodingCache``:

* each request the worker holds has a *local* trie over its tokens (prompt + outputs),
  built the first time the request samples and extended with every token it accepts;
* one *global* trie holds the outputs of the last ``max_cached_requests`` requests
  started (FIFO: the oldest start goes first; a running request's outputs are in it as
  they grow; 0: no global trie);
* each step, for a request that sampled, both tries speculate from its last
  ``max_tree_depth`` tokens (``SuffixTree.speculate``, at most ``min(k, room)`` tokens)
  and the draft whose probabilities sum higher is proposed, the local one on a tie. A
  draft's length varies from 0 to that cap, request by request.

Lifetimes: a request's local trie goes when it leaves the batch (finished, aborted or
preempted); its outputs stay in the global trie until the FIFO evicts them. A request
seen again (resumed after preemption, or replayed after a crash, in a new batch slot
``generation``) gets its local trie rebuilt from its tokens, and its outputs re-enter the
global trie as a new start (vLLM restarts such a request's outputs from the empty
sequence and its local trie from the prompt alone; rebuilding from the tokens held drafts
as if the request had not left). The proposer lives on the worker, which a core restart
keeps (``ModelRunner.reset_requests``), so past requests' outputs survive a crash;
a crash in the middle of an update drops the global trie rather than keep a half-written
one. Drafts never change greedy or seeded outputs (the verifier keeps the target's
samples), so losing any of this state costs acceptance only.

    >>> p = SuffixProposer(4, SuffixSettings(max_cached_requests=8))
    >>> p.observe("a", generation=0, tokens=[5, 6, 7, 8, 5, 6], num_prompt=4)
    >>> p.speculate("a", [5, 6, 7, 8, 5, 6], room=4)
    [7, 8]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

import msgspec
import numpy as np

from actorllm.worker.input_batch import InputBatch
from actorllm.worker.spec_decode.suffix_tree import SuffixTree


class SuffixSettings(msgspec.Struct, frozen=True, kw_only=True):
    """vLLM's ``suffix_decoding_*`` keys (its defaults; checked in
    ``engine/config/speculative.py``)."""

    max_tree_depth: int = 24  # the tries' depth: a match and its draft share it
    max_cached_requests: int = 10000  # past requests whose outputs are kept (0: none)
    max_spec_factor: float = 1.0  # a draft holds at most this many tokens per matched one
    min_token_prob: float = 0.1  # the least estimated probability of a draft token


class SuffixStatistics(msgspec.Struct, frozen=True, kw_only=True):
    active_requests: int  # requests with a local trie (held by the worker's batch)
    cached_requests: int  # requests whose outputs are in the global trie
    local_tokens: int  # tokens in all local tries
    global_tokens: int  # tokens in the global trie


@final
class _Local:
    __slots__ = ("generation", "seen", "tree")

    def __init__(self, generation: int, tree: SuffixTree) -> None:
        self.generation = generation  # the batch slot's generation it was built for
        self.seen = 0  # the request's tokens in ``tree`` (prompt + outputs so far)
        self.tree = tree


@final
class SuffixProposer:
    """Drafts of at most ``k`` (``num_speculative_tokens``) tokens. Worker thread only."""

    def __init__(self, k: int, settings: SuffixSettings) -> None:
        s = settings
        if k < 1 or s.max_tree_depth < 1 or s.max_cached_requests < 0 or s.max_spec_factor < 0:
            raise ValueError(f"need k >= 1, max_tree_depth >= 1, max_cached_requests >= 0 "
                             f"and max_spec_factor >= 0, got {k}, {s}")  # fmt: skip
        if not 0.0 <= s.min_token_prob <= 1.0:
            raise ValueError(f"min_token_prob must be in [0, 1], got {s.min_token_prob}")
        self.k = k
        self.max_tree_depth = s.max_tree_depth
        self.max_cached_requests = s.max_cached_requests
        self.max_spec_factor = s.max_spec_factor
        self.min_token_prob = s.min_token_prob
        self._local: dict[str, _Local] = {}  # {req_id: its trie}, requests in the batch
        self._global = SuffixTree(s.max_tree_depth)  # outputs of the cached requests
        # {req_id: number of its outputs in the global trie}, oldest start first (FIFO)
        self._cached: dict[str, int] = {}
        self._updating = False  # a trie update is under way (True after a crash in one)

    # -- driven by the runner ----------------------------------------------------------

    def propose(
        self, batch: InputBatch, slots: Sequence[int], room: Sequence[int]
    ) -> list[list[int]]:
        """Drafts for the requests in ``slots`` that sampled (each at most ``room[i]``
        tokens; a room of 0 records the request's tokens and drafts nothing). Requests no
        longer in ``batch`` lose their local trie."""
        for gone in [r for r in self._local if r not in batch.req_id_to_index]:
            del self._local[gone]
        out: list[list[int]] = []
        for slot, r in zip(slots, room, strict=True):
            req_id = batch.req_ids[slot]
            assert req_id is not None
            n = int(batch.num_tokens[slot])
            tokens = batch.token_ids[slot, :n]
            self.observe(
                req_id, int(batch.generation[slot]), tokens, int(batch.num_prompt_tokens[slot])
            )
            out.append(self.speculate(req_id, tokens, r) if r > 0 else [])
        return out

    def forget(self, req_id: str) -> None:
        """The request left the batch (finished, aborted, preempted): its local trie goes;
        its outputs stay cached."""
        self._local.pop(req_id, None)

    def reset(self) -> None:
        """The batch was rebuilt (a core restart): every request is new again. The global
        trie stays, unless a crash interrupted an update of it."""
        self._local.clear()
        if self._updating:
            self._global = SuffixTree(self.max_tree_depth)
            self._cached.clear()
            self._updating = False

    # -- the two steps, for tests and the doctest ---------------------------------------

    def observe(
        self, req_id: str, generation: int, tokens: Sequence[int] | np.ndarray, num_prompt: int
    ) -> None:
        """Bring the request's tries up to its ``tokens`` (prompt + accepted outputs)."""
        self._updating = True
        local = self._local.get(req_id)
        n = len(tokens)
        if local is None or local.generation != generation:
            local = self._local[req_id] = _Local(generation, SuffixTree(self.max_tree_depth))
            self._start_cached(req_id)
        new = [int(t) for t in tokens[local.seen : n]]
        local.tree.extend(req_id, new)
        local.seen = n
        if req_id in self._cached:  # not evicted yet: its outputs grow there too
            outputs = [int(t) for t in tokens[num_prompt + self._cached[req_id] : n]]
            self._global.extend(req_id, outputs)
            self._cached[req_id] += len(outputs)
        self._updating = False

    def speculate(self, req_id: str, tokens: Sequence[int] | np.ndarray, room: int) -> list[int]:
        """The draft after ``tokens`` (the request's, already observed)."""
        cap = min(self.k, room)
        context = [int(t) for t in tokens[-self.max_tree_depth :]]
        args = (cap, self.max_spec_factor, self.min_token_prob)
        mine = self._local[req_id].tree.speculate(context, *args)
        if not len(self._global):
            return mine.token_ids
        theirs = self._global.speculate(context, *args)
        return (mine if mine.score >= theirs.score else theirs).token_ids

    def statistics(self) -> SuffixStatistics:
        return SuffixStatistics(
            active_requests=len(self._local),
            cached_requests=len(self._cached),
            local_tokens=sum(loc.seen for loc in self._local.values()),
            global_tokens=self._global.num_tokens,
        )

    def _start_cached(self, req_id: str) -> None:
        """A request starts (again): its outputs get a fresh sequence in the global trie,
        the newest; the oldest starts beyond ``max_cached_requests`` are evicted."""
        if self.max_cached_requests == 0:
            return
        if req_id in self._cached:
            del self._cached[req_id]
            self._global.discard(req_id)
        self._cached[req_id] = 0
        while len(self._cached) > self.max_cached_requests:
            oldest = next(iter(self._cached))
            del self._cached[oldest]
            self._global.discard(oldest)
