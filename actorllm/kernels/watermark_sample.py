"""Gumbel-max watermark sampling: the random draw replaced by ``argmax(logits + G)``, where
G is Gumbel noise from the keyed PRF over the row's context (:mod:`.philox_prf`).

vLLM 0.32's ``GumbelWatermarker._sample_watermarked``: uniforms clamped to float32's
smallest normal, ``G = -log(-log(u))``, first maximum. The logits are the processed ones
(penalties, temperature, min-p, top-k/top-p already applied: masked tokens are ``-inf``),
so a watermarked draw follows the same distribution as an ordinary one; the token is a
pure function of (key, context, logits), which is what the detector scores.

Pruning. G never exceeds ``G_MAX`` (the noise of the largest uniform, ~16.6), so a token
whose logit is more than ``G_MAX`` below the best ``logit + G`` seen so far cannot win.
Scoring the 64 largest logits of each row first gives that bound; only the tokens above
it get a PRF draw. A language model's logits span far more than 16.6 (and masked tokens
are ``-inf``), so few tokens remain; where many do (a flat distribution) the whole
vocabulary is drawn, as vLLM does. Either way the winner is the same token.
"""

from __future__ import annotations

import torch

from actorllm.kernels.philox_prf import (
    UINT32_MASK,
    philox_uniform,
    uint32_to_uniform,
    uniforms_at,
    vocab_uniforms,
)

_TINY = torch.finfo(torch.float32).tiny
_PROBE = 64  # the largest logits of each row scored first: the pruning bound
_MIN_VOCAB = 1024  # below this the whole vocabulary costs less than the probe
_MAX_KEPT = 0.25  # prune only when at most this share of the [N, V] tokens remains
_CHUNK_TOKENS = 1 << 21  # (rows x vocabulary) drawn at once by the whole-vocabulary path


def _noise(uniforms: torch.Tensor) -> torch.Tensor:
    """float32 uniforms -> Gumbel noise ``-log(-log(u))`` (vLLM's ops, in place)."""
    return uniforms.clamp_min(_TINY).log_().neg_().log_().neg_()


# The largest noise any token can draw, plus slack for float32 rounding in the bound.
G_MAX = float(_noise(uint32_to_uniform(torch.tensor([UINT32_MASK], dtype=torch.int64)))[0])


def gumbel_watermark_sample(logits: torch.Tensor, contexts: torch.Tensor, key: int) -> torch.Tensor:
    """logits: [N, V] float32 processed; contexts: [N, W] int64 (-1: no token) -> [N] int64."""
    if logits.shape[-1] >= _MIN_VOCAB:
        pruned = _pruned_sample(logits, contexts, key)
        if pruned is not None:
            return pruned
    # Rows in chunks of ~2M tokens: the PRF's int64 temporaries stay ~16 MiB each.
    n, v = logits.shape
    step = max(1, _CHUNK_TOKENS // v)
    out = [
        torch.argmax(
            logits[i : i + step] + _noise(vocab_uniforms(key, contexts[i : i + step], v)), dim=-1
        )  # [chunk]
        for i in range(0, n, step)
    ]
    return torch.cat(out) if len(out) > 1 else out[0]


def _pruned_sample(logits: torch.Tensor, contexts: torch.Tensor, key: int) -> torch.Tensor | None:
    """:func:`gumbel_watermark_sample` drawing only the tokens that can win; None where
    too many can (then the whole vocabulary is cheaper)."""
    n, v = logits.shape
    top, top_ids = logits.topk(_PROBE, dim=-1)  # [N, P]
    best = (top + _noise(philox_uniform(key, contexts, top_ids))).amax(dim=-1)  # [N]
    floor = best - G_MAX - (1e-3 + 1e-6 * best.abs())  # [N]: below it, no token can win
    keep = logits >= floor.unsqueeze(1)  # [N, V]; NaN bounds keep nothing
    # Host sync: the survivors' count decides the path.
    if not bool(keep.any(dim=-1).all()) or int(keep.sum()) > _MAX_KEPT * n * v:
        return None
    rows, cols = keep.nonzero(as_tuple=True)  # [M] each
    values = logits[rows, cols] + _noise(uniforms_at(key, contexts, rows, cols))  # [M]
    scores = torch.full_like(logits, float("-inf")).index_put_((rows, cols), values)
    return torch.argmax(scores, dim=-1)


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
