"""The verifier's output distribution on a tiny vocabulary: chi-square against the target
distribution and against the non-speculative sampler (fixed seeds: it cannot flake)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler_output import NewRequestData
from actorllm.worker.input_batch import InputBatch
from actorllm.worker.sampler import Sampler
from actorllm.worker.sampling_metadata import build_sampling_metadata
from actorllm.worker.spec_decode.verify import accept_runs

CPU = torch.device("cpu")
V = 8
N = 3000  # requests, each verifying one draft
CHI2_999 = {7: 24.32, 4: 18.47}  # chi-square critical values at p = 0.001, by dof
L0 = torch.tensor([2.0, 1.0, 0.5, 0.0, -0.5, 1.5, -1.0, 0.3])  # [V] logits, position 0
L1 = torch.tensor([0.0, 2.5, -1.0, 1.0, 0.2, 0.0, 0.7, -2.0])  # [V] logits, position 1
DRAFT = 5  # drafted token at position 0 (p ~ 0.22 at temperature 1)


def _batch(params: SamplingParams, n: int) -> InputBatch:
    batch = InputBatch(max_num_seqs=n, max_model_len=8, block_size=4)
    for i in range(n):
        batch.add_request(
            NewRequestData(req_id=f"r{i}", prompt_token_ids=[1, 2], output_token_ids=[],
                           sampling_params=params, block_ids=([],), num_computed_tokens=0)
        )  # fmt: skip
        batch.write_drafts(i, [DRAFT])
    return batch


def _speculative(params: SamplingParams, seed: int) -> list[list[int]]:
    batch = _batch(params, N)
    slots = np.repeat(np.arange(N), 2)  # [2N] each request's two verified positions
    offsets = np.tile(np.array([0, 1]), N)
    meta = build_sampling_metadata(batch, slots, V, CPU, None, offsets)
    logits = torch.stack([L0, L1]).repeat(N, 1)  # [2N, V]
    sampled = Sampler(V, CPU, seed)(logits, meta).sampled_token_ids.tolist()
    return accept_runs(sampled, [2] * N, [[DRAFT]] * N)


def _plain(params: SamplingParams, seed: int, logits: torch.Tensor) -> np.ndarray:
    batch = _batch(params, N)
    meta = build_sampling_metadata(batch, np.arange(N), V, CPU)
    return Sampler(V, CPU, seed)(logits.repeat(N, 1), meta).sampled_token_ids.numpy()


def _chi2(counts: np.ndarray, expected: np.ndarray) -> float:
    keep = expected > 0
    return float((((counts - expected) ** 2)[keep] / expected[keep]).sum())


def test_first_token_is_the_target_distribution_and_acceptance_is_p_of_draft() -> None:
    p0 = torch.softmax(L0, -1).numpy()
    p1 = torch.softmax(L1, -1).numpy()
    runs = _speculative(SamplingParams(temperature=1.0), seed=3)
    first = np.bincount([r[0] for r in runs], minlength=V)
    assert _chi2(first, N * p0) < CHI2_999[7]
    accepted = [r for r in runs if len(r) == 2]
    # Accept with probability min(1, p(d) / q(d)) = p(d): q is one-hot.
    rate, sd = len(accepted) / N, np.sqrt(p0[DRAFT] * (1 - p0[DRAFT]) / N)
    assert abs(rate - p0[DRAFT]) < 4 * sd
    # The token after an accepted draft follows position 1's distribution.
    second = np.bincount([r[1] for r in accepted], minlength=V)
    assert _chi2(second, len(accepted) * p1) < CHI2_999[7]
    # On rejection the token comes from the residual max(0, p - onehot(d)), normalised.
    rejected = np.bincount([r[0] for r in runs if len(r) == 1], minlength=V)
    residual = p0.copy()
    residual[DRAFT] = 0.0
    residual /= residual.sum()
    assert rejected[DRAFT] == 0
    assert _chi2(rejected, rejected.sum() * residual) < CHI2_999[7]


@pytest.mark.parametrize("params", [SamplingParams(temperature=0.7, top_k=5)], ids=["topk"])
def test_against_the_non_speculative_sampler(params: SamplingParams) -> None:
    """Two-sample chi-square: first tokens with speculation vs the plain sampler's."""
    spec = np.bincount([r[0] for r in _speculative(params, seed=5)], minlength=V)
    plain = np.bincount(_plain(params, 6, L0), minlength=V)
    used = (spec + plain) > 0
    assert used.sum() == 5  # top_k 5
    table = np.stack([spec[used], plain[used]]).astype(float)  # [2, 5]
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
    assert float(((table - expected) ** 2 / expected).sum()) < CHI2_999[4]
