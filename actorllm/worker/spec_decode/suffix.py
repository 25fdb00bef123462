"""Suffix decoding (vLLM's ``method: "suffix"``, Snowflake's Arctic suffix decoding), on
the host, in Python: drafts from the request's own tokens and from a suffix trie
(``suffix_tree.py``) over the outputs of past requests.

Theory of operation, as vLLM's ``SuffixDecodingProposer`` drives Arctic's
``SuffixDecodingCache``:

* Arctic keeps a *local* trie per request over its tokens (prompt + outputs). Here the
  request's row is searched directly each step (``speculate_tail``: numpy over the row,
  the same drafts as that trie, checked against it in the tests), so a request holds no
  trie: nothing to build when it starts (Arctic's costs O(prompt * depth)), to free when
  it leaves or to rebuild after a crash;
* one *global* trie holds the outputs of the last ``max_cached_requests`` requests
  started (FIFO: the oldest start goes first; a running request's outputs are in it as
  they grow; 0: no global trie);
* each step, for a request that sampled, both speculate from its last
  ``max_tree_depth`` tokens (at most ``min(k, room)`` tokens) and the draft whose
  probabilities sum higher is proposed, the request's own on a tie. A draft's length
  varies from 0 to that cap, request by request.

Lifetimes: a request's record (its batch slot generation) goes when it leaves the batch
(finished, aborted or preempted); its outputs stay in the global trie until the FIFO
evicts them. A request seen again (resumed after preemption, or replayed after a crash,
in a new slot generation) re-enters the global trie as a new start with all its outputs
(vLLM restarts such a request's outputs from the empty sequence and its local trie from
the prompt alone; here it drafts as if it had not left). The proposer lives on the
worker, which a core restart keeps (``ModelRunner.reset_requests``), so past requests'
outputs survive a crash; a crash in the middle of an update drops the global trie rather
than keep a half-written one. Drafts never change greedy or seeded outputs (the verifier
keeps the target's samples), so losing any of this state costs acceptance only.

    >>> p = SuffixProposer(4, SuffixSettings(max_cached_requests=8))
    >>> p.observe("a", generation=0, tokens=[5, 6, 7, 8, 5, 6], num_prompt=4)
    >>> p.speculate(np.array([5, 6, 7, 8, 5, 6]), room=4)
    [7, 8]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

import msgspec
import numpy as np

from actorllm.worker.input_batch import InputBatch
from actorllm.worker.spec_decode.suffix_tree import SuffixTree, speculate_tail


class SuffixSettings(msgspec.Struct, frozen=True, kw_only=True):
    """vLLM's ``suffix_decoding_*`` keys (its defaults; checked in
    ``engine/config/speculative.py``)."""

    max_tree_depth: int = 24  # the tries' depth: a match and its draft share it
    max_cached_requests: int = 10000  # past requests whose outputs are kept (0: none)
    max_spec_factor: float = 1.0  # a draft holds at most this many tokens per matched one
    min_token_prob: float = 0.1  # the least estimated probability of a draft token


class SuffixStatistics(msgspec.Struct, frozen=True, kw_only=True):
    active_requests: int  # requests recorded in the worker's batch
    cached_requests: int  # requests whose outputs are in the global trie
    global_tokens: int  # tokens in the global trie


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
        # {req_id: the batch slot generation it was last recorded in}, requests in the batch
        self._active: dict[str, int] = {}
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
        longer in ``batch`` lose their record."""
        for gone in [r for r in self._active if r not in batch.req_id_to_index]:
            del self._active[gone]
        out: list[list[int]] = []
        for slot, r in zip(slots, room, strict=True):
            req_id = batch.req_ids[slot]
            assert req_id is not None
            n = int(batch.num_tokens[slot])
            tokens = batch.token_ids[slot, :n]
            self.observe(
                req_id, int(batch.generation[slot]), tokens, int(batch.num_prompt_tokens[slot])
            )
            out.append(self.speculate(tokens, r) if r > 0 else [])
        return out

    def forget(self, req_id: str) -> None:
        """The request left the batch (finished, aborted, preempted): its record goes; its
        outputs stay cached."""
        self._active.pop(req_id, None)

    def reset(self) -> None:
        """The batch was rebuilt (a core restart): every request is new again. The global
        trie stays, unless a crash interrupted an update of it."""
        self._active.clear()
        if self._updating:
            self._global = SuffixTree(self.max_tree_depth)
            self._cached.clear()
            self._updating = False

    # -- the two steps, for tests and the doctest ---------------------------------------

    def observe(
        self, req_id: str, generation: int, tokens: Sequence[int] | np.ndarray, num_prompt: int
    ) -> None:
        """Bring the global trie up to the request's ``tokens`` (prompt + accepted
        outputs); a request new to the batch (slot ``generation``) starts there afresh."""
        self._updating = True
        if self._active.get(req_id) != generation:
            self._active[req_id] = generation
            self._start_cached(req_id)
        if req_id in self._cached:  # not evicted yet: its outputs grow there too
            outputs = [int(t) for t in tokens[num_prompt + self._cached[req_id] :]]
            self._global.extend(req_id, outputs)
            self._cached[req_id] += len(outputs)
        self._updating = False

    def speculate(self, tokens: np.ndarray, room: int) -> list[int]:
        """The draft after ``tokens`` ([L] int64, the request's; observed already)."""
        args = (min(self.k, room), self.max_spec_factor, self.min_token_prob)
        mine = speculate_tail(tokens, self.max_tree_depth, *args)
        if not len(self._global):
            return mine.token_ids
        context = tokens[-self.max_tree_depth :].tolist()
        theirs = self._global.speculate(context, *args)
        return (mine if mine.score >= theirs.score else theirs).token_ids

    def statistics(self) -> SuffixStatistics:
        return SuffixStatistics(
            active_requests=len(self._active),
            cached_requests=len(self._cached),
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
