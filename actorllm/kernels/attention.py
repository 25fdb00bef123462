"""Paged attention over block tables for a mixed batch, torch reference.

One call serves a whole step: prefill chunks (any length, starting anywhere, e.g. after a
prefix-cache hit) and decodes (one query token) side by side, packed "varlen":

* ``q``: [T, Hq, D], the step's query tokens, request after request;
* ``query_start_loc``: [B + 1] int32, request b owns rows ``[qsl[b], qsl[b+1])`` of q;
* ``seq_lens``: [B] int32, tokens in request b's context *including* this step's
  (its KV for this step must already be written to the cache);
* ``block_table``: [B, max_blocks] int32, physical blocks of request b in order.

Query row i of request b sits at position ``seq_lens[b] - q_len_b + i`` and attends causally
to keys ``0 ..= position`` (and, with ``sliding_window=w``, only to keys ``> position - w``).
Heads share KV heads GQA-style: query head h reads KV head ``h // (Hq // Hk)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:
    """Reference attention; returns [T, Hq, D] in q's dtype. Softmax in float32."""
    out = torch.empty_like(q)
    # Deliberate host sync: the reference path plans its loops on the host.
    qsl = query_start_loc.tolist()
    lens = seq_lens.tolist()
    b = len(lens)
    q_lens = [qsl[i + 1] - qsl[i] for i in range(b)]
    decodes = [i for i in range(b) if q_lens[i] == 1]
    others = [i for i in range(b) if q_lens[i] > 1]
    for bucket in _length_buckets(decodes, lens):
        _decode_batch(
            q, k_cache, v_cache, qsl, lens, block_table, scale, sliding_window, bucket, out
        )
    for i in others:
        start, end = qsl[i], qsl[i + 1]
        k, v = _gather_kv(k_cache, v_cache, block_table[i], lens[i])  # [S, Hk, D]
        out[start:end] = _attend(q[start:end], k, v, lens[i], scale, sliding_window)
    return out


def _length_buckets(rows: list[int], lens: list[int], ratio: float = 1.5) -> list[list[int]]:
    """Decode rows grouped by context length, so padding to a group's longest context
    wastes at most ``ratio``-1 of its work (one group when the lengths are close)."""
    buckets: list[list[int]] = []
    start = 0
    for i in sorted(rows, key=lens.__getitem__):
        if not buckets or lens[i] > ratio * start:
            buckets.append([])
            start = lens[i]
        buckets[-1].append(i)
    return buckets


def _gather_kv(
    k_cache: torch.Tensor, v_cache: torch.Tensor, blocks: torch.Tensor, seq_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    bs = k_cache.shape[1]
    n = (seq_len + bs - 1) // bs
    ids = blocks[:n].long()
    k = k_cache.index_select(0, ids).flatten(0, 1)[:seq_len]  # [S, Hk, D]
    v = v_cache.index_select(0, ids).flatten(0, 1)[:seq_len]
    return k, v


def _attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    seq_len: int,
    scale: float,
    window: int | None,
) -> torch.Tensor:
    """q: [L, Hq, D], k/v: [S, Hk, D] -> [L, Hq, D]; causal with the queries at the end."""
    q_len, hq, _ = q.shape
    group = hq // k.shape[1]
    q_pos = torch.arange(seq_len - q_len, seq_len).unsqueeze(1)  # [L, 1]
    k_pos = torch.arange(seq_len).unsqueeze(0)  # [1, S]
    mask = k_pos <= q_pos
    if window is not None:
        mask &= k_pos > q_pos - window
    qf = q.float().transpose(0, 1)  # [Hq, L, D]
    kf = k.float().transpose(0, 1)  # [Hk, S, D]
    vf = v.float().transpose(0, 1)
    # enable_gqa: query head h reads KV head h // group without materialising the repeats.
    o = F.scaled_dot_product_attention(
        qf, kf, vf, attn_mask=mask, scale=scale, enable_gqa=group > 1
    )  # [Hq, L, D]
    return o.transpose(0, 1).to(q.dtype)


def _decode_batch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    qsl: list[int],
    lens: list[int],
    block_table: torch.Tensor,
    scale: float,
    window: int | None,
    rows: list[int],
    out: torch.Tensor,
) -> None:
    """All one-token queries at once: pad their contexts to the longest and mask."""
    _, bs, hk, d = k_cache.shape
    hq = q.shape[1]
    group = hq // hk
    idx = torch.tensor(rows)
    q_rows = torch.tensor([qsl[i] for i in rows])
    ctx = torch.tensor([lens[i] for i in rows])  # [N]
    max_len = int(ctx.max())
    n_blocks = (max_len + bs - 1) // bs
    blocks = block_table.index_select(0, idx)[:, :n_blocks].long().flatten()  # [N * nb]
    # index_select on the block axis: 3.5x faster on CPU than advanced indexing.
    k = k_cache.index_select(0, blocks).view(-1, n_blocks * bs, hk, d)[:, :max_len]  # [N, S, Hk, D]
    v = v_cache.index_select(0, blocks).view(-1, n_blocks * bs, hk, d)[:, :max_len]
    k_pos = torch.arange(max_len).unsqueeze(0)  # [1, S]
    q_pos = (ctx - 1).unsqueeze(1)  # [N, 1]
    mask = k_pos <= q_pos
    if window is not None:
        mask &= k_pos > q_pos - window
    # The G query heads of a KV head play the part of G query positions: one 4-D attention
    # over [N, Hk] with no copy of K/V per query head (2x faster than a 5-D broadcast on CPU).
    qf = q.index_select(0, q_rows).float().view(-1, hk, group, d)  # [N, Hk, G, D]
    kf = k.float().transpose(1, 2)  # [N, Hk, S, D]
    vf = v.float().transpose(1, 2)
    o = F.scaled_dot_product_attention(
        qf, kf, vf, attn_mask=mask.view(-1, 1, 1, max_len), scale=scale
    )  # [N, Hk, G, D]
    out[q_rows] = o.reshape(-1, hq, d).to(q.dtype)
