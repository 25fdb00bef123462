"""The inputs of one drafting forward: some requests each compute a run of tokens at
consecutive positions, written into the drafter's KV cache through the target's block
tables (draft models and EAGLE heads share the target's blocks)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from actorllm.models.attention import AttentionMetadata
from actorllm.worker.device_streams import to_device
from actorllm.worker.input_batch import InputBatch

# (slot, first position, token ids [L]) of each request in the forward
Row = tuple[int, int, np.ndarray]


@dataclass
class DraftRows:
    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64
    meta: AttentionMetadata
    last: torch.Tensor  # [B] int64, each request's last row in [T]


def draft_rows(batch: InputBatch, rows: list[Row], device: torch.device) -> DraftRows:
    """Request ``slot`` computes ``tokens`` at positions ``start, start + 1, ...``."""
    bs = batch.block_size
    lens = np.array([len(t) for _, _, t in rows], dtype=np.int64)  # [B]
    slots = np.array([s for s, _, _ in rows], dtype=np.int64)  # [B]
    starts = np.array([st for _, st, _ in rows], dtype=np.int64)  # [B]
    qsl = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lens, out=qsl[1:])
    total = int(qsl[-1])
    positions = np.repeat(starts - qsl[:-1], lens) + np.arange(total)  # [T]
    input_ids = np.concatenate([t for _, _, t in rows]).astype(np.int64)  # [T]
    rep = np.repeat(slots, lens)  # [T]
    slot_mapping = batch.block_table[rep, positions // bs].astype(np.int64) * bs + (
        positions % bs
    )  # [T]
    seq_lens = (starts + lens).astype(np.int32)  # [B]
    nb = -(-int(seq_lens.max()) // bs)
    meta = AttentionMetadata(
        query_start_loc=to_device(qsl.astype(np.int32), device),
        seq_lens=to_device(seq_lens, device),
        block_table=to_device(np.ascontiguousarray(batch.block_table[slots, :nb]), device),
        slot_mapping=to_device(slot_mapping, device),
        query_start_loc_cpu=qsl.tolist(),
        seq_lens_cpu=seq_lens.tolist(),
        max_query_len=int(lens.max()),
        max_seq_len=int(seq_lens.max()),
        # the target's plan by position: a draft model equal to the target drafts its bits
        prompt_lens_cpu=batch.num_prompt_tokens[slots].tolist(),
    )
    return DraftRows(
        input_ids=to_device(input_ids, device),
        positions=to_device(positions, device),
        meta=meta,
        last=to_device(qsl[1:] - 1, device),
    )
