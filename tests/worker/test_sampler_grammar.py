"""The sampler under a grammar bitmask: every sampling mode stays inside the allowed set,
logprobs reflect the mask, and min_tokens folds into the mask without emptying it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler_output import GrammarBitmask, NewRequestData
from actorllm.worker.input_batch import InputBatch
from actorllm.worker.sampler import Sampler
from actorllm.worker.sampling_metadata import build_sampling_metadata

CPU = torch.device("cpu")
V = 40
ALLOWED = [3, 17, 33]  # spans two 32-token words


def _mask(allowed: list[int]) -> np.ndarray:
    row = np.zeros(2, dtype=np.uint32)
    for t in allowed:
        row[t // 32] |= np.uint32(1 << (t % 32))
    return row.view(np.int32)


def _run(params: list[SamplingParams], logits: torch.Tensor, constrained: list[bool],
         allowed: list[int] = ALLOWED, outputs: list[int] | None = None,
         eos: int | None = None):  # fmt: skip
    batch = InputBatch(max_num_seqs=len(params) + 1, max_model_len=64, block_size=4)
    for i, p in enumerate(params):
        batch.add_request(NewRequestData(
            req_id=f"r{i}", prompt_token_ids=[1, 2], output_token_ids=outputs or [],
            sampling_params=p, block_ids=([],), num_computed_tokens=0, eos_token_id=eos,
        ))  # fmt: skip
    ids = [f"r{i}" for i, c in enumerate(constrained) if c]
    grammar = GrammarBitmask(req_ids=ids, bitmask=np.stack([_mask(allowed)] * len(ids)))
    meta = build_sampling_metadata(batch, np.arange(len(params)), V, CPU, grammar)
    return Sampler(V, CPU, seed=0)(logits.clone(), meta)


MODES = {
    "greedy": SamplingParams(temperature=0.0),
    "random": SamplingParams(temperature=1.0),
    "seeded": SamplingParams(temperature=0.8, seed=7),
    "top_k": SamplingParams(temperature=1.0, top_k=2),
    "top_p": SamplingParams(temperature=1.0, top_p=0.5),
    "min_p": SamplingParams(temperature=1.0, min_p=0.5),
    "penalties": SamplingParams(temperature=1.0, repetition_penalty=1.5, presence_penalty=1.0),
    "bias": SamplingParams(temperature=0.0, logit_bias={5: 100.0}),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_every_mode_samples_inside_the_mask(mode: str) -> None:
    torch.manual_seed(0)
    logits = torch.randn(16, V) * 4
    logits[:, 5] = 50.0  # the model's favourite is forbidden
    params = [MODES[mode]] * 16
    out = _run(params, logits, [True] * 16, outputs=[5, 3]).sampled_token_ids.tolist()
    assert set(out) <= set(ALLOWED), out


def test_unconstrained_rows_are_untouched() -> None:
    logits = torch.zeros(2, V)
    logits[:, 5] = 10.0
    out = _run([SamplingParams(temperature=0.0)] * 2, logits, [True, False])
    assert out.sampled_token_ids.tolist()[1] == 5
    assert out.sampled_token_ids.tolist()[0] in ALLOWED


def test_logprobs_reflect_the_mask() -> None:
    logits = torch.zeros(1, V)
    out = _run([SamplingParams(temperature=0.0, logprobs=3)], logits, [True])
    assert out.logprobs is not None
    lp = out.logprobs.logprobs[0].tolist()
    assert all(math.isclose(x, -math.log(3), rel_tol=1e-5) for x in lp[:4])
    assert set(out.logprobs.token_ids[0, 1:].tolist()) == set(ALLOWED)


def test_logit_bias_applies_after_logprobs_but_inside_the_mask() -> None:
    logits = torch.zeros(1, V)
    p = SamplingParams(temperature=0.0, logprobs=1, logit_bias={17: 5.0})
    out = _run([p], logits, [True])
    assert out.sampled_token_ids.tolist() == [17]
    assert out.logprobs is not None
    assert math.isclose(out.logprobs.logprobs[0, 0].item(), -math.log(3), rel_tol=1e-5)


def test_min_tokens_removes_stop_tokens_from_the_mask() -> None:
    logits = torch.zeros(1, V)
    logits[0, 33] = 10.0  # 33 is EOS here
    p = SamplingParams(temperature=0.0, min_tokens=4)
    assert _run([p], logits, [True], eos=33).sampled_token_ids.tolist() == [3]


def test_min_tokens_yields_when_the_grammar_allows_only_stop() -> None:
    logits = torch.zeros(1, V)
    p = SamplingParams(temperature=0.0, min_tokens=4)
    out = _run([p], logits, [True], allowed=[33], eos=33)
    assert out.sampled_token_ids.tolist() == [33]  # the grammar is complete: it must end


@pytest.mark.parametrize("mode", ["greedy", "seeded", "top_k", "top_p", "bias"])
def test_the_native_bitmask_kernel_samples_as_mask_then_sample(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CPU C kernel (csrc/token_bitmask.c) against the torch unpack-and-fill path: the
    same tokens and the same logprobs, constrained and unconstrained rows mixed."""
    from actorllm.kernels import token_bitmask

    if token_bitmask._native_apply(torch.float32) is None:
        pytest.skip("no working C compiler here")
    torch.manual_seed(3)
    logits = torch.randn(8, V) * 4
    logits[:, 5] = 50.0  # forbidden, and the favourite of the unconstrained rows
    p = MODES[mode]
    params = [
        SamplingParams(
            temperature=p.temperature, seed=p.seed, top_k=p.top_k, top_p=p.top_p,
            logit_bias=p.logit_bias, logprobs=4,
        )
    ] * 8  # fmt: skip
    constrained = [True, False, True, True, False, True, True, True]
    native = _run(params, logits, constrained)
    monkeypatch.setattr(token_bitmask, "_native_apply", lambda dtype: None)
    monkeypatch.setattr(token_bitmask, "_xgrammar_cpu_apply", lambda: None)
    reference = _run(params, logits, constrained)
    assert torch.equal(native.sampled_token_ids, reference.sampled_token_ids)
    assert native.logprobs is not None and reference.logprobs is not None
    assert torch.equal(native.logprobs.token_ids, reference.logprobs.token_ids)
    assert torch.equal(native.logprobs.logprobs, reference.logprobs.logprobs)
    rows = [i for i, c in enumerate(constrained) if c]
    assert set(native.sampled_token_ids[rows].tolist()) <= set(ALLOWED)


@pytest.mark.parametrize("mode", ["greedy", "random", "top_k", "bias"])
def test_bfloat16_logits_are_masked_in_place_with_the_float32_tokens(mode: str) -> None:
    """A bf16 model's logits take the grammar mask without a float32 copy (CPU kernel):
    the same tokens as the float32 widening of the same logits, all inside the mask."""
    torch.manual_seed(1)
    logits = (torch.randn(24, V) * 4).bfloat16()
    logits[:, 5] = 50.0
    params = [MODES[mode]] * 24
    constrained = [i % 3 != 0 for i in range(24)]
    a = _run(params, logits, constrained).sampled_token_ids.tolist()
    b = _run(params, logits.float(), constrained).sampled_token_ids.tolist()
    assert a == b
    assert all(t in ALLOWED for t, c in zip(a, constrained, strict=True) if c)
