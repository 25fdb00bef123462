"""One step's model inputs as one int64 tensor: what rank 0 sends the other ranks.

Ranks 1..N-1 hold no request state at all: no input batch, no sampler. Rank 0 plans the
step as always; just before the forward it packs the final device inputs (placeholders
already filled) and the rows whose logits it will compute, in the order it will compute
them (the sampled rows, then each prompt-logprobs request's rows): every
``compute_logits`` is a gather the other ranks must join.

LoRA: each token row's adapter slot (-1: the base model), or nothing when no row of the
step uses an adapter (``worker/lora_slots.py`` keeps every rank's slots the same).
Embedding prompts: the rows that take a given embedding instead of their token's, and
those embeddings in the model's dtype, their bytes carried as int64 words (the receiver
knows the hidden size and the dtype).

Layout, all int64::

    [T, B, G, L, max_query_len, max_seq_len, A, E, nb_0 .. nb_{G-1}, rows_0 .. rows_{L-1}]
    input_ids [T], positions [T], query_start_loc [B + 1], seq_lens [B], prompt_lens [B]
    (-1 each where rank 0's metadata has none),
    per KV cache group g: block_table [B * nb_g], slot_mapping [T],
    logits rows: L groups, concatenated, LoRA row slots [A] (A: the rows, or 0),
    embedding rows [E], their [E, H] values' bytes padded to whole words

    >>> import torch
    >>> from actorllm.models.attention import AttentionMetadata
    >>> meta = AttentionMetadata(torch.tensor([0, 2], dtype=torch.int32),
    ...     torch.tensor([2], dtype=torch.int32), torch.tensor([[1]], dtype=torch.int32),
    ...     torch.tensor([16, 17]), [0, 2], [2], 2, 2)
    >>> embeds = (torch.tensor([1]), torch.tensor([[0.5, -1.0, 2.0]], dtype=torch.bfloat16))
    >>> packed = pack_step(torch.tensor([5, 6]), torch.tensor([0, 1]), meta, [torch.tensor([1])],
    ...     lora_rows=torch.tensor([0, -1]), prompt_embeds=embeds)
    >>> step = unpack_step(packed, embed_spec=(3, torch.bfloat16))
    >>> step.input_ids.tolist(), step.meta.block_table.tolist(), step.meta.seq_lens_cpu
    ([5, 6], [[1]], [2])
    >>> [r.tolist() for r in step.logit_rows], step.lora_rows.tolist()
    ([[1]], [0, -1])
    >>> step.prompt_embeds[0].tolist(), step.prompt_embeds[1].tolist()
    ([1], [[0.5, -1.0, 2.0]])
"""

from __future__ import annotations

import dataclasses

import torch

from actorllm.models.attention import AttentionMetadata

_FIXED = 8


@dataclasses.dataclass(frozen=True)
class RankStep:
    """One step's model inputs as ranks 1..N-1 receive them."""

    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64
    meta: AttentionMetadata
    logit_rows: list[torch.Tensor]  # [N_i] rows of each compute_logits call, in order
    lora_rows: torch.Tensor | None  # [T] each row's adapter slot; None: no adapter row
    prompt_embeds: tuple[torch.Tensor, torch.Tensor] | None  # [E] rows, [E, H] values


def pack_step(
    input_ids: torch.Tensor,
    positions: torch.Tensor,
    meta: AttentionMetadata,
    logit_rows: list[torch.Tensor],
    lora_rows: torch.Tensor | None = None,
    prompt_embeds: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """input_ids, positions: [T]; meta: the step's attention metadata (every KV cache
    group); logit_rows: [N_i] row indices per compute_logits call; lora_rows: [T] each
    row's adapter slot or None; prompt_embeds: [E] rows and their [E, H] values (in the
    model's dtype) or None -> [P] int64."""
    groups = [meta, *meta.other_groups]
    t, b = input_ids.numel(), len(meta.seq_lens_cpu)
    a = 0 if lora_rows is None else lora_rows.numel()
    e = 0 if prompt_embeds is None else prompt_embeds[0].numel()
    head = [t, b, len(groups), len(logit_rows), meta.max_query_len, meta.max_seq_len, a, e]
    head += [int(g.block_table.shape[1]) for g in groups]
    head += [int(r.numel()) for r in logit_rows]
    parts = [
        torch.tensor(head, dtype=torch.int64),
        input_ids,
        positions,
        meta.query_start_loc,
        meta.seq_lens,
        torch.tensor(
            meta.prompt_lens_cpu if meta.prompt_lens_cpu is not None else [-1] * b,
            dtype=torch.int64,
        ),
    ]
    for g in groups:
        parts += [g.block_table[:b].reshape(-1), g.slot_mapping]
    parts += logit_rows
    if lora_rows is not None:
        parts.append(lora_rows)
    words = []
    if prompt_embeds is not None:
        rows, values = prompt_embeds
        parts.append(rows)
        raw = values.detach().cpu().contiguous().view(-1).view(torch.uint8)
        pad = -raw.numel() % 8
        words = [torch.cat([raw, raw.new_zeros(pad)]).view(torch.int64)]  # bits, not values
    return torch.cat([p.to(torch.int64) for p in parts] + words)


def unpack_step(
    packed: torch.Tensor, embed_spec: tuple[int, torch.dtype] | None = None
) -> RankStep:
    """The inverse of :func:`pack_step`. ``embed_spec``: the model's (hidden size, dtype),
    needed when the step carries embedding prompts."""
    t, b, g, n_rows, max_q, max_s, a, e = packed[:_FIXED].tolist()
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
    prompt_lens = take(b).tolist()  # [B], -1 each: none
    tables = [(take(b * nb).to(torch.int32).view(b, nb), take(t)) for nb in nbs]
    rows = [take(n) for n in lens]
    lora_rows = take(a) if a else None
    embeds = None
    if e:
        assert embed_spec is not None, "a step with embedding prompts needs embed_spec"
        hidden, dtype = embed_spec
        size = torch.empty((), dtype=dtype).element_size()
        embed_rows = take(e)
        raw = take(-(-e * hidden * size // 8)).contiguous().view(torch.uint8)
        embeds = (embed_rows, raw[: e * hidden * size].view(dtype).view(e, hidden))  # [E, H]
    first = AttentionMetadata(
        query_start_loc=qsl,
        seq_lens=seq_lens,
        block_table=tables[0][0],
        slot_mapping=tables[0][1],
        query_start_loc_cpu=qsl.tolist(),
        seq_lens_cpu=seq_lens.tolist(),
        max_query_len=max_q,
        max_seq_len=max_s,
        prompt_lens_cpu=None if b and prompt_lens[0] < 0 else prompt_lens,
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
            prompt_lens_cpu=first.prompt_lens_cpu,
        )
        for table, slots in tables[1:]
    )
    if others:
        first = dataclasses.replace(first, other_groups=others)
    return RankStep(input_ids, positions, first, rows, lora_rows, embeds)
