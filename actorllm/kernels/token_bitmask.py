"""Constrained decoding's logits step, torch reference: additive adjust, then the grammar's
token bitmask (a forbidden token's logit becomes -inf).

The bitmask comes from the grammar matchers (``actorllm.structured_output``): ``[R, W]``
int32, ``W = ceil(V / 32)``, bit ``t % 32`` of word ``t // 32`` set = token ``t`` allowed.
``rows`` maps each logits row to its bitmask row (``-1``: unconstrained), so only the
structured requests of a batch need bitmask rows.

    >>> logits = torch.zeros(2, 3)
    >>> mask = torch.tensor([[0b101]], dtype=torch.int32)
    >>> apply_token_bitmask(logits, mask, torch.tensor([-1, 0])).tolist()
    [[0.0, 0.0, 0.0], [0.0, -inf, 0.0]]
"""

from __future__ import annotations

import torch


def unpack_bitmask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[R, W] int32 -> [R, V] bool (True = allowed); tokens past 32 * W are forbidden."""
    shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)  # [32]
    bits = (bitmask.unsqueeze(-1) >> shifts) & 1  # [R, W, 32]
    allowed = bits.reshape(bitmask.shape[0], -1).bool()  # [R, 32W]
    if allowed.shape[1] >= vocab_size:
        return allowed[:, :vocab_size]
    pad = torch.zeros(
        bitmask.shape[0], vocab_size - allowed.shape[1], dtype=torch.bool, device=bitmask.device
    )
    return torch.cat([allowed, pad], dim=1)


def apply_token_bitmask(
    logits: torch.Tensor,
    bitmask: torch.Tensor,
    rows: torch.Tensor,
    adjust: torch.Tensor | None = None,
) -> torch.Tensor:
    """``logits + adjust``, then -inf where the row's bitmask forbids the token. In place.

    logits: [N, V] float32 (modified and returned); bitmask: [R, W] int32;
    rows: [N] int64, the bitmask row of each logits row or -1; adjust: [N, V] float32
    additive (logit_bias, bans) or None.
    """
    if adjust is not None:
        logits.add_(adjust)
    constrained = (rows >= 0).nonzero().squeeze(1)  # [C]; host sync on CUDA (reference path)
    if constrained.numel() == 0:
        return logits
    allowed = unpack_bitmask(bitmask.index_select(0, rows[constrained]), logits.shape[1])  # [C, V]
    sub = logits.index_select(0, constrained)  # [C, V]
    logits.index_copy_(0, constrained, sub.masked_fill(~allowed, float("-inf")))
    return logits
