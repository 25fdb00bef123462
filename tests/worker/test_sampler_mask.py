"""Sampler with --return-sampling-mask: the mask and the processed logprobs against a
reference built here from the same logits with plain torch (vLLM's order: temperature,
min-p, top-k, top-p), and the tokens against the sampler without the mask."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler_output import NewRequestData
from actorllm.worker.input_batch import InputBatch
from actorllm.worker.sampler import Sampler
from actorllm.worker.sampling_metadata import build_sampling_metadata

CPU = torch.device("cpu")
V = 64


def _meta(params: list[SamplingParams]):  # type: ignore[no-untyped-def]
    batch = InputBatch(max_num_seqs=len(params) + 2, max_model_len=64, block_size=4)
    for i, p in enumerate(params):
        batch.add_request(
            NewRequestData(
                req_id=f"r{i}",
                prompt_token_ids=[1, 2, 3],
                output_token_ids=[],
                sampling_params=p,
                block_ids=([],),
                num_computed_tokens=0,
            )
        )
    return build_sampling_metadata(batch, np.arange(len(params)), V, CPU)


def _reference(logits: torch.Tensor, p: SamplingParams) -> torch.Tensor:
    """[V] logits -> [V] the row's processed logits (-inf where filtered), one row at a
    time with sorts and loops rather than the sampler's batched kernels."""
    x = logits / p.temperature
    if p.min_p > 0:
        probs = x.softmax(-1)
        x = x.masked_fill(probs < probs.max() * p.min_p, float("-inf"))
    if p.top_k > 0:
        kth = x.sort(descending=True).values[min(p.top_k, V) - 1]
        x = x.masked_fill(x < kth, float("-inf"))
    if p.top_p < 1.0:
        order = x.argsort(descending=True, stable=True)
        probs = x.softmax(-1)
        mass = 0.0
        keep = torch.zeros(V, dtype=torch.bool)
        for tok in order.tolist():
            if mass >= p.top_p and keep.any():
                break
            keep[tok] = True
            mass += float(probs[tok])
        x = x.masked_fill(~keep, float("-inf"))
    return x


PARAMS = [
    SamplingParams(temperature=0.8, top_k=5, seed=1, logprobs=3),
    SamplingParams(temperature=1.0, top_k=40, top_p=0.7, seed=2, logprobs=3),
    SamplingParams(temperature=1.3, top_k=20, min_p=0.05, seed=3, logprobs=3),
    SamplingParams(temperature=0.6, top_k=64, top_p=0.9, min_p=0.01, logprobs=3),
]


@pytest.mark.parametrize("step", range(4))
def test_mask_and_processed_logprobs_match_the_reference(step: int) -> None:
    g = torch.Generator().manual_seed(step)
    logits = torch.randn(len(PARAMS), V, generator=g) * 3  # [N, V]
    out = Sampler(V, CPU, seed=step, return_sampling_mask=True)(logits.clone(), _meta(PARAMS))
    assert out.sampling_mask is not None and out.logprobs is not None
    for i, p in enumerate(PARAMS):
        ref = _reference(logits[i], p)
        assert torch.equal(out.sampling_mask[i], ref > float("-inf"))
        tok = int(out.sampled_token_ids[i])
        assert bool(out.sampling_mask[i, tok])
        ref_lp = ref.log_softmax(-1)
        ids = out.logprobs.token_ids[i]  # [chosen, top-3]
        torch.testing.assert_close(out.logprobs.logprobs[i], ref_lp[ids])


def test_tokens_are_the_unmasked_samplers() -> None:
    """The seeded draw is the same with and without the mask: one filtered torch path."""
    seeded = [SamplingParams(temperature=0.9, top_k=8, top_p=0.95, seed=s) for s in range(6)]
    logits = torch.randn(6, V, generator=torch.Generator().manual_seed(9))
    plain = Sampler(V, CPU)(logits.clone(), _meta(seeded)).sampled_token_ids
    masked = Sampler(V, CPU, return_sampling_mask=True)(logits.clone(), _meta(seeded))
    assert torch.equal(plain, masked.sampled_token_ids)
    assert masked.logprobs is None  # no row asked


def test_bfloat16_logits_give_a_float32_mask_path() -> None:
    logits = torch.randn(2, V, generator=torch.Generator().manual_seed(4))
    params = PARAMS[:2]
    full = Sampler(V, CPU, return_sampling_mask=True)(logits.clone(), _meta(params))
    half = Sampler(V, CPU, return_sampling_mask=True)(logits.bfloat16(), _meta(params))
    assert half.sampling_mask is not None and full.sampling_mask is not None
    widened = logits.bfloat16().float()
    ref = [_reference(widened[i], p) > float("-inf") for i, p in enumerate(params)]
    assert torch.equal(half.sampling_mask, torch.stack(ref))
