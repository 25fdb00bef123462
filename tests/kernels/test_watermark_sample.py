"""The Gumbel-max watermark draw: the pruned search picks the token the whole-vocabulary
draw (vLLM's) picks, and falls back to it where pruning would not pay."""

from __future__ import annotations

import pytest
import torch

from actorllm.kernels import watermark_sample as ws
from actorllm.kernels.philox_prf import philox_uniform, vocab_uniforms


def _full(logits: torch.Tensor, contexts: torch.Tensor, key: int) -> torch.Tensor:
    """vLLM's GumbelWatermarker._sample_watermarked, as written there."""
    uniforms = vocab_uniforms(key, contexts, logits.shape[-1])
    uniforms = uniforms.clamp_min(torch.finfo(torch.float32).tiny)
    return torch.argmax(logits + -torch.log(-torch.log(uniforms)), dim=-1)


def _case(n: int, v: int, scale: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, v, generator=g) * scale  # [N, V]
    contexts = torch.randint(-1, v, (n, 4), generator=g)  # [N, W]
    return logits, contexts


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("scale", [6.0, 12.0])
def test_the_pruned_draw_picks_the_whole_vocabularys_token(scale: float, seed: int) -> None:
    logits, contexts = _case(6, 4096, scale, seed)
    assert ws._pruned_sample(logits, contexts, 7) is not None  # peaked: pruned
    assert torch.equal(ws.gumbel_watermark_sample(logits, contexts, 7), _full(logits, contexts, 7))


def test_masked_tokens_are_never_drawn_and_prune_away() -> None:
    logits, contexts = _case(4, 4096, 1.0, 9)
    keep = logits.topk(20, dim=-1).indices
    masked = torch.full_like(logits, float("-inf")).scatter(1, keep, logits.gather(1, keep))
    got = ws.gumbel_watermark_sample(masked, contexts, 3)
    assert ws._pruned_sample(masked, contexts, 3) is not None
    assert torch.equal(got, _full(masked, contexts, 3))
    assert all(int(t) in keep[i].tolist() for i, t in enumerate(got))


def test_a_flat_distribution_draws_the_whole_vocabulary() -> None:
    logits, contexts = _case(3, 4096, 0.5, 1)
    assert ws._pruned_sample(logits, contexts, 5) is None
    assert torch.equal(ws.gumbel_watermark_sample(logits, contexts, 5), _full(logits, contexts, 5))


def test_g_max_bounds_every_draw() -> None:
    top = philox_uniform(1, torch.tensor([[1]]), torch.tensor([0]))
    assert float(ws._noise(top)[0, 0]) <= ws.G_MAX
    assert abs(ws.G_MAX - 16.6355) < 1e-3  # -log(-log((2**24) / (2**24 + 1)))


def test_the_whole_vocabulary_is_drawn_in_row_chunks_with_the_same_tokens(monkeypatch) -> None:
    logits, contexts = _case(5, 4096, 0.5, 2)
    monkeypatch.setattr(ws, "_CHUNK_TOKENS", 2 * 4096)  # two rows at a time: 2 + 2 + 1
    assert torch.equal(ws.gumbel_watermark_sample(logits, contexts, 4), _full(logits, contexts, 4))
