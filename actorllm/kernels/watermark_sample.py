"""Gumbel-max watermark sampling: the random draw replaced by ``argmax(logits + G)``, where
G is Gumbel noise from the keyed PRF over the row's context (:mod:`.philox_prf`).

vLLM 0.32's ``GumbelWatermarker._sample_watermarked``: uniforms clamped to float32's
smallest normal, ``G = -log(-log(u))``, first maximum. The logits are the processed ones
(penalties, temperature, min-p, top-k/top-p already applied: masked tokens are ``-inf``),
so a watermarked draw follows the same distribution as an ordinary one; the token is a
pure function of (key, context, logits), which is what the detector scores.
"""

from __future__ import annotations

import torch

from actorllm.kernels.philox_prf import vocab_uniforms

_TINY = torch.finfo(torch.float32).tiny


def gumbel_watermark_sample(logits: torch.Tensor, contexts: torch.Tensor, key: int) -> torch.Tensor:
    """logits: [N, V] float32 processed; contexts: [N, W] int64 (-1: no token) -> [N] int64."""
    uniforms = vocab_uniforms(key, contexts, logits.shape[-1]).clamp_min(_TINY)  # [N, V]
    noise = uniforms.log_().neg_().log_().neg_()  # -log(-log(u)), in place
    return torch.argmax(logits + noise, dim=-1)


def keyed_watermark_sample(
    logits: torch.Tensor, contexts: torch.Tensor, keys: list[int]
) -> torch.Tensor:
    """Rows keyed one by one (``dual_key_gumbel`` routes each row to key A or B): one
    :func:`gumbel_watermark_sample` per distinct key over its rows. keys: [N] -> [N] int64."""
    out = torch.empty(logits.shape[0], dtype=torch.int64, device=logits.device)
    for key in sorted(set(keys)):
        rows = [i for i, k in enumerate(keys) if k == key]
        index = torch.tensor(rows, dtype=torch.int64, device=logits.device)
        out[index] = gumbel_watermark_sample(logits[index], contexts[index], key)
    return out
