"""One step's model inputs as one int64 tensor: what rank 0 sends the other ranks.

Ranks 1..N-1 hold no request state at all: no input batch, no sampler. Rank 0 plans the
step as always; just before the forward it packs the final device inputs (placeholders
already filled) and the rows whose logits it will compute, in the order it will compute
them (the sampled rows, then each prompt-logprobs request's rows): every
``compute_logits`` is a gather the other ranks must join.

LoRA: each token row's adapter slot (-1: the base model), or nothing when no row of the
step uses an adapter (``worker/lora_slots.py`` keeps every rank's slots the same).

Layout, all int64::

    [T, B, G, L, max_query_len, max_seq_len, A, nb_0 .. nb_{G-1}, rows_0 .. rows_{L-1}]
    input_ids [T], positions [T], query_start_loc [B + 1], seq_lens [B],
    per KV cache group g: block_table [B * nb_g], slot_mapping [T],
    logits rows: L groups, concatenated, LoRA row slots [A] (A: the rows, or 0)

    >>> import torch
    >>> from actorllm.models.attention import AttentionMetadata
    >>> meta = AttentionMetadata(torch.tensor([0, 2], dtype=torch.int32),
    ...     torch.tensor([2], dtype=torch.int32), torch.tensor([[1]], dtype=torch.int32),
    ...     torch.tensor([16, 17]), [0, 2], [2], 2, 2)
    >>> packed = pack_step(torch.tensor([5, 6]), torch.tensor([0, 1]), meta, [torch.tensor([1])],
    ...     lora_rows=torch.tensor([0, -1]))
    >>> ids, pos, meta2, rows, lora = unpack_step(packed)
    >>> ids.tolist(), meta2.block_table.tolist(), meta2.seq_lens_cpu, [r.tolist() for r in rows]
    ([5, 6], [[1]], [2], [[1]])
    >>> lora.tolist()
    [0, -1]
"""

from __future__ import annotations

import dataclasses

import torch

from actorllm.models.attention import AttentionMetadata

_FIXED = 7


def pack_step(
    input_ids: torch.Tensor,
    positions: torch.Tensor,
    meta: AttentionMetadata,
    logit_rows: list[torch.Tensor],
    lora_rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """input_ids, positions: [T]; meta: the step's attention metadata (every KV cache
    group); logit_rows: [N_i] row indices per compute_logits call; lora_rows: [T] each
    row's adapter slot or None -> [P] int64."""
    groups = [meta, *meta.other_groups]
    t, b = input_ids.numel(), len(meta.seq_lens_cpu)
    a = 0 if lora_rows is None else lora_rows.numel()
    head = [t, b, len(groups), len(logit_rows), meta.max_query_len, meta.max_seq_len, a]
    head += [int(g.block_table.shape[1]) for g in groups]
    head += [int(r.numel()) for r in logit_rows]
    parts = [
        torch.tensor(head, dtype=torch.int64),
        input_ids,
        positions,
        meta.query_start_loc,
        meta.seq_lens,
    ]
    for g in groups:
        parts += [g.block_table[:b].reshape(-1), g.slot_mapping]
    parts += logit_rows
    if lora_rows is not None:
        parts.append(lora_rows)
    return torch.cat([p.to(torch.int64) for p in parts])


def unpack_step(
    packed: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, list[torch.Tensor], torch.Tensor | None]:
    """The inverse of :func:`pack_step`: (input_ids [T], positions [T], metadata, the
    logits rows of each compute_logits call, the LoRA row slots [T] or None)."""
    t, b, g, n_rows, max_q, max_s, a = packed[:_FIXED].tolist()
    nbs = packed[_FIXED : _FIXED + g].tolist()
    lens = packed[_FIXED + g : _FIXED + g + n_rows].tolist()
    at = _FIXED + g + n_rows

    def take(n: int) -> torch.Tensor:
        nonlocal at
        out = packed[at : at + n]
        at += n
        return out

    input_ids, positions = take(t), take(t)
    qsl = take(b + 1).to(torch.int32)  # [B + 1]
    seq_lens = take(b).to(torch.int32)  # [B]
    tables = [(take(b * nb).to(torch.int32).view(b, nb), take(t)) for nb in nbs]
    rows = [take(n) for n in lens]
    lora_rows = take(a) if a else None
    first = AttentionMetadata(
        query_start_loc=qsl,
        seq_lens=seq_lens,
        block_table=tables[0][0],
        slot_mapping=tables[0][1],
        query_start_loc_cpu=qsl.tolist(),
        seq_lens_cpu=seq_lens.tolist(),
        max_query_len=max_q,
        max_seq_len=max_s,
    )
    others = tuple(
        AttentionMetadata(
            query_start_loc=qsl,
            seq_lens=seq_lens,
            block_table=table,
            slot_mapping=slots,
            query_start_loc_cpu=first.query_start_loc_cpu,
            seq_lens_cpu=first.seq_lens_cpu,
            max_query_len=max_q,
            max_seq_len=max_s,
        )
        for table, slots in tables[1:]
    )
    if others:
        first = dataclasses.replace(first, other_groups=others)
    return input_ids, positions, first, rows, lora_rows
