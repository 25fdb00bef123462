"""The worker's persistent per-request state (vLLM's ``InputBatch`` idea).

Theory of operation: every request the worker holds sits in one *slot* (a row) of
preallocated host arrays — its token ids, lengths, block table and sampling parameters — so
a step never rebuilds per-request Python lists. ``SchedulerOutput`` only says what changed:
new requests take a free slot, cached ones get new blocks and their ``num_computed_tokens``,
finished/preempted ones free their slot. :meth:`InputBatch.condense` then moves the last
occupied rows into the holes so slots ``[0, num_reqs)`` are dense and batch order is stable.

The worker appends the tokens it samples itself (:meth:`append_token`); the scheduler never
sends them back. Under async scheduling a sampled token may still be on the device when the
next step is planned: :meth:`add_pending` counts it (``num_pending``) and records which
slot of the runner's device token buffer holds it (``sampled_slot``), so the next step's
input can be gathered on the device; :meth:`resolve_pending` later writes it on the host.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler_output import CachedRequestData, NewRequestData
from actorllm.core.thinking_budget import ThinkingMarkers
from actorllm.core.thinking_scan import ThinkingScan

if TYPE_CHECKING:
    from actorllm.worker.logitsprocs.state import BatchProcessors


class InputBatchFullError(RuntimeError):
    """More requests, tokens or blocks than the batch was sized for."""


class InputBatch:
    """Preallocated slots for up to ``max_num_seqs`` requests of up to ``max_model_len`` tokens.

    Not thread-safe: owned by the worker thread.
    """

    def __init__(
        self, max_num_seqs: int, max_model_len: int, block_size: int, num_kv_groups: int = 1
    ) -> None:
        self.max_num_seqs = max_num_seqs
        self.max_model_len = max_model_len
        self.block_size = block_size
        self.max_blocks = -(-max_model_len // block_size)
        s = max_num_seqs
        # [slot] -> request id (None = free); dense in [0, num_reqs) after condense().
        self.req_ids: list[str | None] = [None] * s
        self.req_id_to_index: dict[str, int] = {}
        self.num_reqs = 0  # slots [0, num_reqs) may be occupied; holes until condense()
        self.token_ids = np.zeros((s, max_model_len), dtype=np.int64)  # prompt | outputs
        self.num_prompt_tokens = np.zeros(s, dtype=np.int64)
        self.num_tokens = np.zeros(s, dtype=np.int64)  # known tokens (prompt + outputs)
        self.num_computed_tokens = np.zeros(s, dtype=np.int64)  # tokens with KV in the cache
        # Sampled on the device, not yet written to token_ids (async scheduling).
        self.num_pending = np.zeros(s, dtype=np.int64)
        # Slot of the device token buffer holding the latest pending token (moves with rows).
        self.sampled_slot = np.zeros(s, dtype=np.int64)
        # Incarnation of the request in the slot: a resolved token lands only in the same one.
        self.generation = np.zeros(s, dtype=np.int64)
        self._next_generation = 1
        # One block table per KV cache group (core/kv_cache/groups.py), each [S, max_blocks]
        # int32, 0 = null block; every group's table has num_blocks entries per request.
        self.block_tables = [
            np.zeros((s, self.max_blocks), dtype=np.int32) for _ in range(num_kv_groups)
        ]
        self.block_table = self.block_tables[0]  # [S, max_blocks], group 0's
        self.num_blocks = np.zeros(s, dtype=np.int64)
        # Sampling parameters as arrays for the hot path; the rest read from `params`.
        self.temperature = np.ones(s, dtype=np.float32)
        self.top_k = np.zeros(s, dtype=np.int32)
        self.top_p = np.ones(s, dtype=np.float32)
        self.min_p = np.zeros(s, dtype=np.float32)
        self.presence_penalty = np.zeros(s, dtype=np.float32)
        self.frequency_penalty = np.zeros(s, dtype=np.float32)
        self.repetition_penalty = np.ones(s, dtype=np.float32)
        self.params: list[SamplingParams | None] = [None] * s
        self.eos_token_id: list[int | None] = [None] * s
        # Custom logits processors, told of every slot change (None: none configured).
        self.logitsprocs: BatchProcessors | None = None
        # Embedding prompts' rows, (torch.Tensor [num_prompt_tokens, H], mask), by request
        # id: the prompt positions of these requests take these rows, not their placeholder
        # ids; a mixed prompt's mask ([num_prompt_tokens] bool) says which positions do.
        self.prompt_embeds: dict[str, tuple[Any, np.ndarray | None]] = {}
        # Thinking-budget rows' scans of their tokens so far, by the incarnation
        # (``generation``) they read: a cache rebuilt from the tokens, never moved or reused.
        self.thinking_scans: dict[int, ThinkingScan] = {}

    # -- membership ------------------------------------------------------------------

    def add_request(self, new: NewRequestData) -> int:
        """Place a (new or resumed) request in a free slot; returns the slot.

        Raises :class:`InputBatchFullError` when no slot is free or the request is longer
        than ``max_model_len``.
        """
        if new.req_id in self.req_id_to_index:
            self.remove_request(new.req_id)  # resumed without an explicit preemption
        idx = self._free_slot()
        tokens = [*new.prompt_token_ids, *new.output_token_ids]
        if len(tokens) > self.max_model_len:
            raise InputBatchFullError(
                f"request {new.req_id} has {len(tokens)} tokens, "
                f"more than max_model_len {self.max_model_len}"
            )
        self.req_ids[idx] = new.req_id
        self.req_id_to_index[new.req_id] = idx
        self.num_reqs = max(self.num_reqs, idx + 1)
        n = len(tokens)
        self.token_ids[idx, :n] = tokens
        self.token_ids[idx, n:] = 0  # rows past num_tokens stay zero (no stale tokens)
        self.num_prompt_tokens[idx] = len(new.prompt_token_ids)
        self.num_tokens[idx] = n
        self.num_computed_tokens[idx] = new.num_computed_tokens
        self.num_pending[idx] = 0
        self.generation[idx] = self._next_generation
        self._next_generation += 1
        self.num_blocks[idx] = 0
        for table in self.block_tables:
            table[idx] = 0
        self._append_blocks(idx, new.block_ids)
        sp = new.sampling_params
        self.temperature[idx] = sp.temperature
        self.top_k[idx] = sp.top_k
        self.top_p[idx] = sp.top_p
        self.min_p[idx] = sp.min_p
        self.presence_penalty[idx] = sp.presence_penalty
        self.frequency_penalty[idx] = sp.frequency_penalty
        self.repetition_penalty[idx] = sp.repetition_penalty
        self.params[idx] = sp
        self.eos_token_id[idx] = new.eos_token_id
        if new.prompt_embeds is not None:
            mask = new.prompt_embeds_mask
            self.prompt_embeds[new.req_id] = (
                new.prompt_embeds,
                None if mask is None else np.array(mask, dtype=np.bool_),
            )
        if self.logitsprocs is not None:
            self.logitsprocs.added(idx, sp, list(new.prompt_token_ids), list(new.output_token_ids))
        return idx

    def update_cached(self, cached: CachedRequestData) -> int:
        """Append a held request's new blocks and take the scheduler's computed count;
        returns its slot (:meth:`update_cached_many` for one request)."""
        self.update_cached_many([cached])
        return self.req_id_to_index[cached.req_id]

    def update_cached_many(self, cached: Sequence[CachedRequestData]) -> None:
        """A step's held requests (every id known): one array write for the computed
        counts, blocks appended only where some arrived."""
        if not cached:
            return
        index = self.req_id_to_index
        slots = [index[c.req_id] for c in cached]
        self.num_computed_tokens[slots] = [c.num_computed_tokens for c in cached]
        for idx, c in zip(slots, cached, strict=True):
            if c.new_block_ids[0]:
                self._append_blocks(idx, c.new_block_ids)

    def remove_request(self, req_id: str) -> int | None:
        """Free a request's slot (leaves a hole until :meth:`condense`); None if unknown."""
        idx = self.req_id_to_index.pop(req_id, None)
        if idx is None:
            return None
        self.req_ids[idx] = None
        self.params[idx] = None
        self.num_pending[idx] = 0
        self.prompt_embeds.pop(req_id, None)
        self.thinking_scans.pop(int(self.generation[idx]), None)
        if self.logitsprocs is not None:
            self.logitsprocs.removed(idx)
        return idx

    def condense(self) -> list[tuple[int, int]]:
        """Move the last occupied rows into holes so slots ``[0, num_reqs)`` are all used.

        Returns the ``(src, dst)`` moves, in order.
        """
        holes = [i for i in range(self.num_reqs) if self.req_ids[i] is None]  # ascending
        last = self.num_reqs - 1
        moves: list[tuple[int, int]] = []
        for hole in holes:
            while last > hole and self.req_ids[last] is None:
                last -= 1
            if last <= hole:
                break
            self._move(last, hole)
            moves.append((last, hole))
            last -= 1
        self.num_reqs = len(self.req_id_to_index)
        return moves

    def append_token(self, idx: int, token: int) -> None:
        """Record a token the worker sampled for the request in slot ``idx``."""
        self._append_tokens(np.array([idx], dtype=np.int64), np.array([token], dtype=np.int64))

    def _append_tokens(self, idx: np.ndarray, tokens: np.ndarray) -> None:
        """Append one token to each of the distinct slots ``idx`` ([N] int64 each)."""
        n = self.num_tokens[idx]  # [N] where each token goes
        full = n >= self.max_model_len
        if full.any():
            slot = int(idx[full.argmax()])
            raise InputBatchFullError(f"request {self.req_ids[slot]} reached max_model_len")
        self.token_ids[idx, n] = tokens
        self.num_tokens[idx] = n + 1

    def add_pending(self, idx: int | np.ndarray, device_slot: int | np.ndarray) -> None:
        """A token was sampled for slot(s) ``idx`` into the device buffer's ``device_slot``
        (scalars, or [N] arrays of distinct slots)."""
        self.num_pending[idx] += 1
        self.sampled_slot[idx] = device_slot

    def resolve_pending(self, idx: int, generation: int, token: int) -> bool:
        """Write the oldest pending token of slot ``idx`` on the host, if the slot still holds
        the incarnation ``generation`` that sampled it; returns whether it did."""
        if self.req_ids[idx] is None or self.generation[idx] != generation:
            return False
        self.resolve_pending_many([idx], [generation], [token])
        return True

    def resolve_pending_many(
        self, slots: list[int], generations: list[int], tokens: list[int]
    ) -> None:
        """Write the oldest pending token of each of the distinct occupied ``slots`` on the
        host, where the slot still holds its ``generations`` entry (the incarnation that
        sampled it)."""
        if not slots:
            return
        idx = np.asarray(slots, dtype=np.int64)  # [N]
        same = self.generation[idx] == np.asarray(generations, dtype=np.int64)  # [N] bool
        tok = np.asarray(tokens, dtype=np.int64)  # [N]
        if not same.all():
            idx, tok = idx[same], tok[same]
        self._append_tokens(idx, tok)  # (raises before anything is written)
        self.num_pending[idx] -= 1

    def resolve_pending_runs(
        self, slots: list[int], generations: list[int], runs: list[list[int]]
    ) -> None:
        """Speculative decoding: like :meth:`resolve_pending_many`, but each slot's pending
        sample is a run of tokens (accepted drafts, then the target's token)."""
        for idx, gen, run in zip(slots, generations, runs, strict=True):
            if self.generation[idx] != gen:
                continue
            n = int(self.num_tokens[idx])
            if n + len(run) > self.max_model_len:
                raise InputBatchFullError(f"request {self.req_ids[idx]} reached max_model_len")
            self.token_ids[idx, n : n + len(run)] = run
            self.num_tokens[idx] = n + len(run)
            self.num_pending[idx] -= 1

    def write_drafts(self, idx: int, drafts: list[int]) -> None:
        """Place draft tokens after the request's known tokens (inputs of a speculative
        step; not counted as tokens until accepted)."""
        n = int(self.num_tokens[idx])
        if n + len(drafts) > self.max_model_len:
            raise InputBatchFullError(f"request {self.req_ids[idx]}: drafts past max_model_len")
        self.token_ids[idx, n : n + len(drafts)] = drafts

    def thinking_scan(self, idx: int, markers: ThinkingMarkers) -> ThinkingScan:
        """The scan of slot ``idx``'s tokens for its thinking budget
        (``core/thinking_scan.py``), kept while the slot holds this incarnation."""
        gen = int(self.generation[idx])
        scan = self.thinking_scans.get(gen)
        if scan is None or scan.markers != markers:
            scan = self.thinking_scans[gen] = ThinkingScan(markers)
        return scan

    def output_token_ids(self, idx: int) -> np.ndarray:
        """[num_outputs] int64 view of the request's sampled tokens."""
        return self.token_ids[idx, self.num_prompt_tokens[idx] : self.num_tokens[idx]]

    def statistics(self) -> dict[str, int]:
        return {"num_reqs": len(self.req_id_to_index), "max_num_seqs": self.max_num_seqs}

    # -- internals -------------------------------------------------------------------

    def _free_slot(self) -> int:
        for i in range(self.max_num_seqs):
            if self.req_ids[i] is None:
                return i
        raise InputBatchFullError(f"all {self.max_num_seqs} slots are in use")

    def _append_blocks(self, idx: int, block_ids: tuple[list[int], ...]) -> None:
        """Append each group's new blocks (as many in every group: tables stay aligned)."""
        first = block_ids[0]
        if not first:
            return
        if len(block_ids) != len(self.block_tables):
            raise InputBatchFullError(
                f"request {self.req_ids[idx]}: {len(block_ids)} block tables, the worker has "
                f"{len(self.block_tables)} KV cache groups"
            )
        start = int(self.num_blocks[idx])
        end = start + len(first)
        if end > self.max_blocks:
            raise InputBatchFullError(
                f"request {self.req_ids[idx]} has more than {self.max_blocks} blocks"
            )
        for table, ids in zip(self.block_tables, block_ids, strict=True):
            table[idx, start:end] = ids
        self.num_blocks[idx] = end

    _ROW_ARRAYS = (
        "token_ids",
        "num_prompt_tokens",
        "num_tokens",
        "num_computed_tokens",
        "block_table",
        "num_blocks",
        "temperature",
        "top_k",
        "top_p",
        "min_p",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "num_pending",
        "sampled_slot",
        "generation",
    )

    def _move(self, src: int, dst: int) -> None:
        for name in self._ROW_ARRAYS:
            arr = getattr(self, name)
            if arr.ndim == 2:
                n = int(self.num_tokens[src]) if name == "token_ids" else int(self.num_blocks[src])
                arr[dst, :n] = arr[src, :n]
                arr[dst, n:] = 0
            else:
                arr[dst] = arr[src]
        n = int(self.num_blocks[src])
        for table in self.block_tables[1:]:  # group 0's is block_table, moved above
            table[dst, :n] = table[src, :n]
            table[dst, n:] = 0
        req_id = self.req_ids[src]
        assert req_id is not None
        self.req_ids[dst], self.req_ids[src] = req_id, None
        self.params[dst], self.params[src] = self.params[src], None
        self.num_pending[src] = 0  # a free slot holds nothing pending
        self.eos_token_id[dst] = self.eos_token_id[src]
        self.req_id_to_index[req_id] = dst
        if self.logitsprocs is not None:
            self.logitsprocs.moved(src, dst)
