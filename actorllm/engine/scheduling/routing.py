"""Data-parallel routing: which engine replica runs a new request (plain logic, no I/O).

Theory of operation
-------------------
With ``data_parallel_size=M`` the engine runs M replicas (scheduler, executor, worker
thread, each with its own KV cache and prefix cache) behind one router. A request is worth
sending where its prompt's prefix is already cached, but not at any price: a replica that
is far busier than another should not get it just for the cache.

* **Affinity.** The router hashes the prompt's first full blocks (at most
  ``MAX_AFFINITY_BLOCKS``) with the prefix cache's own chained block hash
  (core/kv_cache/block_hash.py), with the request's ``cache_salt`` mixed into the first
  block exactly as there, so a key means "this exact prefix, under this salt": salted
  requests are not drawn to a replica by a cache they could not use. It remembers, for the
  most recent ``table_size`` keys, the replica it last sent that prefix to. A new request
  goes to the replica of its *longest* remembered prefix: two requests sharing a system
  prompt land on the same replica, whose prefix cache holds it.
* **Load.** A replica's load is its open requests: waiting, running, and on their way to
  its scheduler (the caller passes them; the ledger counts them exactly).
* **The rule.** Let ``least`` be the least-loaded live replica (ties: round robin, so an idle
  engine spreads work). The affinity target wins unless it is *much* busier:
  ``load[target] - load[least] > max(MIN_GAP, load[least])``, i.e. more than ``MIN_GAP``
  (8) requests more *and* more than twice as loaded. Then ``least`` wins, and the prefix is
  remembered there from now on. Without a remembered prefix (a prompt shorter than a
  block, a new prefix), ``least`` wins.
* **Replicas die.** :meth:`ReplicaRouter.replica_down` takes a replica out for good; its
  remembered prefixes are forgotten, and no request is routed to it again.

    >>> r = ReplicaRouter(2, block_size=4)
    >>> r.route([1, 2, 3, 4, 5], [0, 0]), r.route([9, 9, 9, 9], [0, 0])  # round robin
    (Decision(replica=0, affinity=False), Decision(replica=1, affinity=False))
    >>> r.route([1, 2, 3, 4, 7, 7], [5, 0])  # same first block: replica 0, busier but not much
    Decision(replica=0, affinity=True)
    >>> r.route([1, 2, 3, 4], [20, 3])  # much busier: the least-loaded replica wins
    Decision(replica=1, affinity=False)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import NamedTuple, final

import msgspec

from actorllm.core.kv_cache.block_hash import BlockHash, BlockHasher, HashAlgo

MAX_AFFINITY_BLOCKS = 16  # prefix blocks hashed per prompt (longer prefixes share these)
MIN_GAP = 8  # an affinity target may be this many requests busier than the least loaded
TABLE_SIZE = 65536  # remembered prefix keys (least recently routed forgotten first)


class Decision(NamedTuple):
    replica: int
    affinity: bool  # chosen for its cached prefix (else for its load)


class RouterStatistics(msgspec.Struct, frozen=True, kw_only=True):
    live: list[int]  # replicas that take requests
    routed: list[int]  # requests routed to each replica (cumulative, moves included)
    affinity_hits: int  # routed to the replica holding their prefix
    affinity_overridden: int  # had a prefix replica, sent elsewhere for load
    remembered_prefixes: int


@final
class ReplicaRouter:
    """Routing state for ``num_replicas`` replicas; lives for the whole engine (the router
    actor owns it, across its restarts)."""

    def __init__(
        self,
        num_replicas: int,
        *,
        block_size: int,
        hash_algo: HashAlgo = "xxh3_128",
        table_size: int = TABLE_SIZE,
    ) -> None:
        if num_replicas < 1:
            raise ValueError(f"num_replicas must be at least 1, got {num_replicas}.")
        self.num_replicas = num_replicas
        self.live: list[int] = list(range(num_replicas))
        self._hasher = BlockHasher(block_size, hash_algo)
        self._table: OrderedDict[BlockHash, int] = OrderedDict()  # {prefix key: replica}
        self._table_size = table_size
        self._cursor = 0  # round robin among equally loaded replicas
        self._routed = [0] * num_replicas
        self._hits = 0
        self._overridden = 0

    def prefix_keys(
        self, token_ids: Sequence[int], cache_salt: str | None = None
    ) -> list[BlockHash]:
        """Chained hashes of the prompt's first full blocks (the prefix cache's keys, with
        ``cache_salt`` in the first as there)."""
        bs = self._hasher.block_size
        n = min(len(token_ids) // bs, MAX_AFFINITY_BLOCKS)
        keys: list[BlockHash] = []
        self._hasher.extend(keys, token_ids[: n * bs], cache_salt)
        return keys

    def route(
        self, token_ids: Sequence[int], loads: Sequence[int], cache_salt: str | None = None
    ) -> Decision:
        """Pick the replica for a prompt (with its ``cache_salt``, vLLM's request field),
        given each replica's load; remember the choice.

        Raises ``LookupError`` when no replica is live."""
        if not self.live:
            raise LookupError("no engine replica is alive")
        keys = self.prefix_keys(token_ids, cache_salt)
        target = self._longest_match(keys)
        least = self._least_loaded(loads)
        if target is not None and loads[target] - loads[least] <= max(MIN_GAP, loads[least]):
            decision = Decision(target, True)
            self._hits += 1
        else:
            if target is not None:
                self._overridden += 1
            decision = Decision(least, False)
            self._cursor = (least + 1) % self.num_replicas
        self._remember(keys, decision.replica)
        self._routed[decision.replica] += 1
        return decision

    def replica_down(self, replica: int) -> bool:
        """Take ``replica`` out for good; False if it was out already."""
        if replica not in self.live:
            return False
        self.live.remove(replica)
        self._table = OrderedDict((k, r) for k, r in self._table.items() if r != replica)
        return True

    def _longest_match(self, keys: list[BlockHash]) -> int | None:
        for key in reversed(keys):
            replica = self._table.get(key)
            if replica is not None:
                return replica  # dead replicas' keys were dropped by replica_down
        return None

    def _least_loaded(self, loads: Sequence[int]) -> int:
        n = self.num_replicas
        # Ties go to the first replica at or after the cursor.
        return min(self.live, key=lambda r: (loads[r], (r - self._cursor) % n))

    def _remember(self, keys: list[BlockHash], replica: int) -> None:
        table = self._table
        for key in keys:
            table[key] = replica
            table.move_to_end(key)
        while len(table) > self._table_size:
            table.popitem(last=False)

    def statistics(self) -> RouterStatistics:
        return RouterStatistics(
            live=list(self.live),
            routed=list(self._routed),
            affinity_hits=self._hits,
            affinity_overridden=self._overridden,
            remembered_prefixes=len(self._table),
        )
