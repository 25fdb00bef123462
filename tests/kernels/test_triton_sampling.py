"""The Triton sampler against ``kernels/sampling.py``, given the same Exp(1) noise.

Interpreter programs are slow (one per row), so the statistical checks use few rows and
the mask checks use adversarial noise instead of many draws: a forbidden token handed a
near-zero Exp(1) draw would win the race, so it shows up at once if it is not masked.
"""

from __future__ import annotations

import pytest
import torch

from actorllm.kernels import sampling as ref
from actorllm.kernels import triton as tk

DevDtype = tuple[torch.device, torch.dtype]


def _params(b: int, dev: torch.device, **kw: float) -> tuple[torch.Tensor, ...]:
    temp = torch.full((b,), kw.get("temperature", 1.0), device=dev)
    top_k = torch.full((b,), int(kw.get("top_k", 0)), dtype=torch.int32, device=dev)
    top_p = torch.full((b,), kw.get("top_p", 1.0), device=dev)
    min_p = torch.full((b,), kw.get("min_p", 0.0), device=dev)
    return temp, top_k, top_p, min_p


def test_greedy_is_argmax_with_ties_to_lowest_id(dev_dtype: DevDtype) -> None:
    dev = dev_dtype[0]
    logits = torch.randn(4, 40, device=dev)
    logits[1, 7] = logits[1, 30] = 50.0  # tie: the lower id wins
    logits[2, 39] = 50.0  # in the last (partial) tile
    noise = torch.full_like(logits, 1e-20)  # ignored by greedy rows
    got = tk.sample_from_logits(logits, *_params(4, dev, temperature=0.0), noise, block_v=16)
    assert got.tolist() == logits.argmax(dim=-1).tolist()
    assert got[1] == 7 and got[2] == 39 and got.dtype == torch.int64


def test_top_k_1_is_argmax(dev_dtype: DevDtype) -> None:
    dev = dev_dtype[0]
    torch.manual_seed(0)
    logits = torch.randn(6, 50, device=dev)
    noise = torch.empty_like(logits).exponential_()
    got = tk.sample_from_logits(logits, *_params(6, dev, temperature=1.5, top_k=1), noise)
    assert got.tolist() == logits.argmax(dim=-1).tolist()


def test_matches_reference_token_for_token(dev_dtype: DevDtype) -> None:
    """Mixed rows (greedy, plain, min-p, top-k, top-p, all together), several vocab tiles."""
    dev = dev_dtype[0]
    torch.manual_seed(1)
    b, v = 10, 100
    logits = torch.randn(b, v, device=dev) * 3
    temp = torch.tensor([0.0, 1.0, 0.7, 1.0, 1.3, 1.0, 0.5, 1.0, 2.0, 0.9], device=dev)
    top_k = torch.tensor([0, 0, 5, 0, 10, 0, 3, 7, 150, 20], dtype=torch.int32, device=dev)
    top_p = torch.tensor([1.0, 1.0, 1.0, 0.3, 0.8, 0.5, 0.9, 1.0, 0.95, 0.6], device=dev)
    min_p = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 0.1, 0.05, 0.2, 0.0, 0.01], device=dev)
    for trial in range(2):
        noise = torch.empty_like(logits).exponential_().clamp_(min=1e-20)
        got = tk.sample_from_logits(logits, temp, top_k, top_p, min_p, noise, block_v=32)
        want = ref.sample_from_logits(logits, temp, top_k, top_p, min_p, noise)
        assert got.tolist() == want.tolist(), f"trial {trial}"


@pytest.mark.parametrize(
    "params",
    [{"top_k": 3}, {"top_p": 0.6}, {"min_p": 0.3}, {"top_k": 5, "top_p": 0.5}],
    ids=["top_k", "top_p", "min_p", "top_k+top_p"],
)
def test_masked_tokens_never_win(dev_dtype: DevDtype, params: dict[str, float]) -> None:
    """Row j hands token j a near-zero draw: it wins iff it survived the masks."""
    dev = dev_dtype[0]
    v = 12
    logits = torch.linspace(2.0, -2.0, v, device=dev).expand(v, v).contiguous()  # token 0 best
    noise = torch.ones(v, v, device=dev)
    noise.fill_diagonal_(1e-20)
    args = (*_params(v, dev, **params), noise)
    got = tk.sample_from_logits(logits, *args, block_v=8)
    want = ref.sample_from_logits(logits, *args)
    assert got.tolist() == want.tolist()
    survivors = [j for j in range(v) if got[j] == j]
    assert 1 <= len(survivors) < v and survivors == list(range(len(survivors)))
    assert all(got[j] == 0 for j in range(len(survivors), v))  # the rest fall to the best


def test_seeded_is_a_pure_function_of_seed_and_position(dev_dtype: DevDtype) -> None:
    dev = dev_dtype[0]
    torch.manual_seed(2)
    b, v = 6, 40
    logits = torch.randn(b, v, device=dev)
    params = _params(b, dev, top_k=10, top_p=0.9)
    seeds = torch.tensor([1, 2, 3, 2**40 + 5, -7, 1], device=dev)
    positions = torch.tensor([0, 0, 5, 9, 2**31, 1], device=dev)
    got = tk.sample_from_logits_seeded(logits, *params, seeds, positions)
    noise = tk.exponential_noise(seeds, positions, v)
    assert got.tolist() == ref.sample_from_logits(logits, *params, noise).tolist()
    # Same (seed, position): same noise, whatever row or batch it sits in.
    again = tk.exponential_noise(seeds[[3, 0]], positions[[3, 0]], v)
    assert torch.equal(again, noise[[3, 0]])
    assert not torch.equal(noise[0], noise[5])  # the position moves the stream
    assert not torch.equal(noise[0], noise[1])  # and so does the seed


def test_exponential_noise_statistics(dev_dtype: DevDtype) -> None:
    dev = dev_dtype[0]
    seeds = torch.tensor([11, 12], device=dev)
    noise = tk.exponential_noise(seeds, torch.zeros(2, dtype=torch.int64, device=dev), 4096)
    assert bool((noise > 0).all())
    flat = noise.flatten().double()
    assert abs(flat.mean().item() - 1.0) < 0.05 and abs(flat.var().item() - 1.0) < 0.1
    # P(E > 1) = e^-1 for Exp(1).
    assert abs((flat > 1).double().mean().item() - 0.3679) < 0.02


@pytest.mark.slow
def test_seeded_frequencies_follow_the_probabilities(dev_dtype: DevDtype) -> None:
    """Chi-square of 300 seeded draws against softmax(logits / T) (fixed seeds: no flakes)."""
    dev = dev_dtype[0]
    n, probs = 300, torch.tensor([0.45, 0.3, 0.15, 0.07, 0.03])
    logits = (probs.log() * 0.5).to(dev).expand(n, -1).contiguous()  # T = 0.5 undoes the 0.5
    seeds = torch.arange(n, device=dev) * 7919 + 1
    got = tk.sample_from_logits_seeded(
        logits, *_params(n, dev, temperature=0.5), seeds, torch.zeros_like(seeds)
    )
    counts = torch.bincount(got.cpu(), minlength=5).double()
    expected = probs.double() * n
    chi2 = ((counts - expected) ** 2 / expected).sum().item()
    assert chi2 < 18.5, (counts.tolist(), chi2)  # p = 0.001 at 4 degrees of freedom


def test_rejects_bad_shapes(dev_dtype: DevDtype) -> None:
    dev = dev_dtype[0]
    logits = torch.randn(2, 8, device=dev)
    with pytest.raises(ValueError, match="noise"):
        tk.sample_from_logits(logits, *_params(2, dev), torch.ones(2, 7, device=dev))
    with pytest.raises(ValueError, match="per-row"):
        tk.sample_from_logits(logits, *_params(3, dev), torch.ones(2, 8, device=dev))
