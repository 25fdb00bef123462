"""In-place penalties (``kernels/sampling.apply_penalties``): bit for bit the where/subtract
form for every mix of penalty kinds, the caller's logits untouched unless consumed."""

from __future__ import annotations

import pytest
import torch

from actorllm.kernels.sampling import apply_penalties, token_counts, token_mask

B, V = 6, 500


def _reference(
    logits: torch.Tensor,
    prompt_mask: torch.Tensor,
    output_counts: torch.Tensor,
    presence: torch.Tensor,
    frequency: torch.Tensor,
    repetition: torch.Tensor,
) -> torch.Tensor:
    """The previous out-of-place form (vLLM's rule, one [B, V] temporary per op)."""
    seen_out = output_counts > 0
    rep = repetition.unsqueeze(1)
    penalized = torch.where(logits > 0, logits / rep, logits * rep)
    logits = torch.where(prompt_mask | seen_out, penalized, logits)
    logits = logits - frequency.unsqueeze(1) * output_counts.to(logits.dtype)
    return logits - presence.unsqueeze(1) * seen_out.to(logits.dtype)


@pytest.mark.parametrize("kinds", ["", "r", "f", "p", "rf", "rp", "fp", "rfp"])
def test_in_place_penalties_match_the_reference_bit_for_bit(kinds: str) -> None:
    g = torch.Generator().manual_seed(len(kinds))
    logits = torch.randn(B, V, generator=g) * 4  # [B, V]
    logits[:, :3] = 0.0  # zeros are "non-positive": multiplied, as before
    prompt_mask = token_counts(torch.randint(0, V + 1, (B, 40), generator=g), V) > 0
    counts = token_counts(torch.randint(0, V + 1, (B, 60), generator=g), V)
    rand = torch.rand(3, B, generator=g)
    presence = rand[0] if "p" in kinds else torch.zeros(B)
    frequency = rand[1] if "f" in kinds else torch.zeros(B)
    repetition = rand[2] + 0.5 if "r" in kinds else torch.ones(B)
    args = (prompt_mask, counts, presence, frequency, repetition)
    want = _reference(logits, *args)
    before = logits.clone()
    assert torch.equal(apply_penalties(logits, *args), want)
    assert torch.equal(logits, before)  # out of place by default
    got = apply_penalties(logits, *args, consume=True)
    assert torch.equal(got, want) and got.data_ptr() == logits.data_ptr()


def test_token_mask_is_counts_above_zero() -> None:
    g = torch.Generator().manual_seed(9)
    ids = torch.randint(0, V + 1, (B, 80), generator=g)  # V: padding
    ids[0] = V  # a row of padding only
    assert torch.equal(token_mask(ids, V), token_counts(ids, V) > 0)
    assert not token_mask(ids, V)[0].any()
