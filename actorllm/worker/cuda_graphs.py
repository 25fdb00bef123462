"""CUDA graphs for decode batches: a ladder of batch sizes, padding, capture and replay.

Theory of operation: a decode step (every scheduled request computes one token) spends more
time launching ~10 kernels per layer than running them at small batch sizes. So at start,
after the KV cache exists, the runner captures the model's forward once per size of a
*ladder* (1, 2, 4, 8, ... up to ``max_num_seqs``, capped), each over static input buffers.
A decode batch of B requests is padded up to the next captured size G (:func:`pad_decode_plan`):
padding requests compute one dummy token at position 0 whose KV slot is -1 (the Triton KV
write skips it) over block table rows of block 0 (the null block), so they touch no real
request's cache and their hidden rows are dropped. Replay copies the step's device inputs
into the graph's static buffers (device-to-device, on the compute stream) and launches the
whole forward with one call. Prefill and mixed batches run eagerly.

What is captured is the forward only; logits and sampling run eagerly after it (their
shapes follow the number of sampling rows, which padding would not help).

Graphs need the Triton backend: the torch reference attention plans its loops on the host
(a sync), which capture forbids. ``enforce_eager=True`` and CPU devices turn graphs off; the
ladder and padding logic is pure numpy and tested on CPU.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from actorllm.models.attention import AttentionMetadata
from actorllm.models.base import CausalLM
from actorllm.worker.kv_cache import KVCaches
from actorllm.worker.step_inputs import InputPlan, StepInputs

DEFAULT_MAX_GRAPH_BATCH = 512


def graph_batch_sizes(max_num_seqs: int, cap: int = DEFAULT_MAX_GRAPH_BATCH) -> list[int]:
    """Ascending ladder: powers of two below ``min(max_num_seqs, cap)``, then that limit.

    >>> graph_batch_sizes(48)
    [1, 2, 4, 8, 16, 32, 48]
    """
    top = min(max_num_seqs, cap)
    if top < 1:
        return []
    sizes = [1 << i for i in range(top.bit_length()) if (1 << i) < top]
    return [*sizes, top]


def padded_batch_size(num_reqs: int, sizes: list[int]) -> int | None:
    """The smallest captured size >= ``num_reqs``, or None when it is above the ladder."""
    i = bisect.bisect_left(sizes, num_reqs)
    return sizes[i] if i < len(sizes) else None


def pad_decode_plan(plan: InputPlan, size: int) -> InputPlan:
    """Pad a decode plan of B requests (one token each) to ``size`` >= B requests.

    Padding request p (B <= p < size): input token 0 at position 0, KV slot -1 (not
    written), ``query_start_loc`` p..p+1, ``seq_len`` 1, no prompt (its row a decode row),
    block table row of zeros (the null block). ``req_ids``, ``slots``, ``sample_mask`` and
    ``sample_hidden_rows`` keep the B real requests, so sampling never sees a padding row.
    Raises ``ValueError`` for a non-decode plan or a size below B.
    """
    b = len(plan.req_ids)
    if not plan.is_decode or plan.num_tokens != b:
        raise ValueError("only decode plans (one token per request) can be padded")
    if size < b:
        raise ValueError(f"cannot pad {b} requests down to {size}")
    pad = size - b

    def ext(a: np.ndarray, value: int) -> np.ndarray:
        return np.concatenate([a, np.full(pad, value, dtype=a.dtype)])

    qsl = np.arange(size + 1, dtype=np.int32)  # one token per request, padding included
    table = np.zeros((size, plan.block_table.shape[1]), dtype=np.int32)  # [G, nb]
    table[:b] = plan.block_table
    return dataclasses.replace(
        plan,
        input_ids=ext(plan.input_ids, 0),
        positions=ext(plan.positions, 0),
        slot_mapping=ext(plan.slot_mapping, -1),
        query_start_loc=qsl,
        seq_lens=ext(plan.seq_lens, 1),
        prompt_lens=ext(plan.prompt_lens, 0),
        block_table=table,
    )


# forward(input_ids [T], positions [T], meta, kv_caches) -> hidden [T, H]
Forward = Callable[[torch.Tensor, torch.Tensor, AttentionMetadata], torch.Tensor]


@dataclasses.dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    input_ids: torch.Tensor  # [G] int64
    positions: torch.Tensor  # [G] int64
    slot_mapping: torch.Tensor  # [G] int64
    query_start_loc: torch.Tensor  # [G + 1] int32
    seq_lens: torch.Tensor  # [G] int32
    block_table: torch.Tensor  # [G, max_blocks] int32
    hidden: torch.Tensor  # [G, H] the captured output


class DecodeGraphs:
    """Captured decode forwards, one per ladder size. CUDA only; worker thread only.

    ``forward`` is called with static buffers during capture (inside ``torch.cuda.graph``),
    so it must not sync with the host: the Triton backend's kernels satisfy that.
    """

    def __init__(
        self,
        sizes: list[int],
        max_blocks_per_seq: int,
        max_seq_len: int,
        device: torch.device,
        stream: torch.cuda.Stream,
    ) -> None:
        self.sizes = sizes
        self.max_blocks_per_seq = max_blocks_per_seq
        self.max_seq_len = max_seq_len  # the split-KV hint baked into every graph
        self.device = device
        self.stream = stream
        self.graphs: dict[int, _Graph] = {}
        self.pool: Any = None  # memory pool handle shared by all graphs
        self.replays = 0  # statistics

    def capture(self, forward: Forward) -> None:
        """Capture every size, largest first (smaller graphs reuse the larger's pool)."""
        for size in sorted(self.sizes, reverse=True):
            self.graphs[size] = self._capture_one(forward, size)

    def _capture_one(self, forward: Forward, size: int) -> _Graph:
        dev = self.device
        g = _Graph(
            graph=torch.cuda.CUDAGraph(),
            input_ids=torch.zeros(size, dtype=torch.int64, device=dev),
            positions=torch.zeros(size, dtype=torch.int64, device=dev),
            slot_mapping=torch.full((size,), -1, dtype=torch.int64, device=dev),
            query_start_loc=torch.arange(size + 1, dtype=torch.int32, device=dev),
            seq_lens=torch.ones(size, dtype=torch.int32, device=dev),
            block_table=torch.zeros((size, self.max_blocks_per_seq), dtype=torch.int32, device=dev),
            hidden=torch.empty(0),
        )
        meta = AttentionMetadata(
            query_start_loc=g.query_start_loc,
            seq_lens=g.seq_lens,
            block_table=g.block_table,
            slot_mapping=g.slot_mapping,
            query_start_loc_cpu=list(range(size + 1)),
            seq_lens_cpu=[1] * size,
            max_query_len=1,
            max_seq_len=self.max_seq_len,
        )
        with torch.cuda.stream(self.stream):
            forward(g.input_ids, g.positions, meta)  # warm-up: compiles kernels, no capture
        self.stream.synchronize()  # deliberate, start-up only: warm-up done before capture
        with torch.cuda.graph(g.graph, pool=self.pool, stream=self.stream):
            g.hidden = forward(g.input_ids, g.positions, meta)  # [G, H]
        if self.pool is None:
            self.pool = g.graph.pool()
        return g

    def size_for(self, num_reqs: int) -> int | None:
        return padded_batch_size(num_reqs, self.sizes) if self.graphs else None

    def replay(self, step: StepInputs) -> torch.Tensor:
        """Run a padded decode step (``step`` holds G = a captured size of rows) through its
        graph; returns the [G, H] hidden states (a view of the graph's static output, valid
        until the next replay). Launches on the current (compute) stream; no host sync."""
        meta = step.attn_metadata
        size = step.input_ids.shape[0]
        g = self.graphs[size]
        nb = meta.block_table.shape[1]
        g.input_ids.copy_(step.input_ids, non_blocking=True)
        g.positions.copy_(step.positions, non_blocking=True)
        g.slot_mapping.copy_(meta.slot_mapping, non_blocking=True)
        g.query_start_loc.copy_(meta.query_start_loc, non_blocking=True)
        g.seq_lens.copy_(meta.seq_lens, non_blocking=True)
        # Columns past nb keep stale ids: attention reads only blocks below ceil(seq_len/bs).
        g.block_table[:, :nb].copy_(meta.block_table, non_blocking=True)
        g.graph.replay()
        self.replays += 1
        return g.hidden

    def statistics(self) -> dict[str, int]:
        return {"graphs": len(self.graphs), "replays": self.replays}


def capture_decode_graphs(
    model: CausalLM,
    caches: KVCaches,
    device: torch.device,
    stream: torch.cuda.Stream,
    *,
    max_num_seqs: int,
    max_batch: int,
    max_blocks_per_seq: int,
    max_seq_len: int,
) -> DecodeGraphs:
    """``model``'s decode forward over ``caches``, captured on ``device``'s ``stream`` for
    every size of the ladder up to ``max_batch`` (blocks for the warm-up and capture of
    each)."""
    graphs = DecodeGraphs(
        graph_batch_sizes(max_num_seqs, max_batch),
        max_blocks_per_seq,
        max_seq_len,
        device,
        stream,
    )
    with torch.inference_mode():
        graphs.capture(lambda ids, pos, meta: model(ids, pos, meta, caches))
    return graphs
