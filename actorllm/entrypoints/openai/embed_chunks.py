"""Embeddings of inputs longer than the context (vLLM's ``--pooler-config
'{"enable_chunked_processing": true, "max_embed_len": N}'``): each input is split into
consecutive pieces of at most ``max_model_len`` tokens, every piece is embedded as its own
engine request, and the input's embedding is the mean of its pieces' embeddings weighted by
their token counts (float32). When the request normalizes (``use_activation``) and every
piece came back L2-normalized, the mean of several pieces is normalized again, as vLLM does.

    >>> split([1, 2, 3, 4, 5], 2)
    [[1, 2], [3, 4], [5]]
    >>> import torch
    >>> combine([torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])], [3, 1], False)
    tensor([0.7500, 0.2500])
"""

from __future__ import annotations

import torch


def split(token_ids: list[int], size: int) -> list[list[int]]:
    """``token_ids`` in consecutive pieces of at most ``size`` tokens."""
    return [token_ids[i : i + size] for i in range(0, len(token_ids), size)]


def combine(pieces: list[torch.Tensor], lengths: list[int], normalize: bool) -> torch.Tensor:
    """pieces: [dim] each, with the token count of each -> the input's embedding [dim]."""
    stacked = torch.stack([p.to(torch.float32) for p in pieces])  # [n, dim]
    weights = torch.tensor(lengths, dtype=torch.float32)  # [n]
    mean = (stacked * weights[:, None]).sum(0) / weights.sum()  # [dim]
    if normalize and len(pieces) > 1:
        norms = torch.linalg.vector_norm(stacked, dim=-1)  # [n]
        # bf16 models' norms are 1 within rounding (vLLM's tolerance)
        if torch.allclose(norms, torch.ones_like(norms), rtol=1e-2, atol=1e-5):
            mean = torch.nn.functional.normalize(mean, dim=-1)
    return mean
