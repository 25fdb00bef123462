"""Pooling heads applied to hidden states (the spec is models/pooler_spec.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from actorllm.models.pooler_spec import PoolerSpec


def pool_rows(hidden: torch.Tensor, starts: list[int], lens: list[int], ptype: str) -> torch.Tensor:
    """One row per sequence: ``hidden`` [T, H] holds the sequences back to back
    (sequence i at rows ``starts[i] : starts[i] + lens[i]``) -> [N, H]."""
    device = hidden.device
    if ptype == "CLS":
        return hidden.index_select(0, torch.tensor(starts, device=device))
    if ptype == "LAST":
        last = [s + n - 1 for s, n in zip(starts, lens, strict=True)]
        return hidden.index_select(0, torch.tensor(last, device=device))
    # MEAN: a segment sum (one index_add over the rows) divided by the lengths, in fp32
    seg = torch.repeat_interleave(
        torch.arange(len(lens), device=device), torch.tensor(lens, device=device)
    )  # [T]
    rows = torch.cat([hidden[s : s + n] for s, n in zip(starts, lens, strict=True)])
    sums = torch.zeros(len(lens), hidden.shape[1], dtype=torch.float32, device=device)
    sums.index_add_(0, seg, rows.float())
    return sums / torch.tensor(lens, device=device, dtype=torch.float32)[:, None]


def finish_embedding(
    row: torch.Tensor, spec: PoolerSpec, use_activation: bool | None, dimensions: int | None
) -> torch.Tensor:
    """One embedding [H] -> [dims]: the matryoshka cut, then normalization."""
    out = row.float()
    dims = dimensions if dimensions is not None else spec.dimensions
    if dims is not None:
        out = out[:dims]
    act = spec.default_use_activation if use_activation is None else use_activation
    if spec.normalize and act:
        out = F.normalize(out, p=2, dim=-1)
    return out


def finish_classification(
    logits: torch.Tensor, spec: PoolerSpec, use_activation: bool | None
) -> torch.Tensor:
    """Logits [..., L] -> probabilities [..., L] (or the calibrated logits without
    activation)."""
    out = logits.float()
    if spec.logit_mean is not None:
        out = out - spec.logit_mean
    if spec.logit_sigma is not None:
        out = out / spec.logit_sigma
    act = spec.default_use_activation if use_activation is None else use_activation
    kind = spec.classify_activation
    if kind == "by_shape":
        kind = "sigmoid" if out.shape[-1] < 2 else "softmax"
    if not act or kind == "identity":
        return out
    return torch.sigmoid(out) if kind == "sigmoid" else out.softmax(-1)
