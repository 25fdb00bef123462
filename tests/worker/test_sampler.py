"""Sampler: every parameter, seeded replay, and raw logprobs.

Distribution checks draw thousands of rows at once through the pure kernel and compare
frequencies with the expected probabilities (tolerance ~4 sigma); masks are checked exactly.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler_output import NewRequestData
from actorllm.kernels.sampling import apply_penalties, sample_from_logits, token_counts
from actorllm.worker.input_batch import InputBatch
from actorllm.worker.sampler import Sampler, seed_for_position
from actorllm.worker.sampling_metadata import build_sampling_metadata

CPU = torch.device("cpu")
V = 8


def _batch(
    rows: list[tuple[SamplingParams, list[int], list[int]]], eos: int | None = None
) -> tuple[InputBatch, np.ndarray]:
    batch = InputBatch(max_num_seqs=len(rows) + 2, max_model_len=64, block_size=4)
    for i, (params, prompt, outputs) in enumerate(rows):
        batch.add_request(
            NewRequestData(
                req_id=f"r{i}",
                prompt_token_ids=prompt,
                output_token_ids=outputs,
                sampling_params=params,
                block_ids=([],),
                num_computed_tokens=0,
                eos_token_id=eos,
            )
        )
    return batch, np.arange(len(rows))


def _sample(
    rows: list[tuple[SamplingParams, list[int], list[int]]],
    logits: torch.Tensor,
    eos: int | None = None,
) -> list[int]:
    batch, slots = _batch(rows, eos)
    meta = build_sampling_metadata(batch, slots, V, CPU)
    return Sampler(V, CPU, seed=0)(logits.clone(), meta).sampled_token_ids.tolist()


def _draws(probs: list[float], n: int = 6000, **kw: float) -> np.ndarray:
    """Token frequencies from n rows of the pure kernel with the given per-row params."""
    logits = torch.tensor(probs).log().expand(n, -1).contiguous()
    g = torch.Generator().manual_seed(1)
    noise = torch.empty(n, len(probs)).exponential_(generator=g)
    out = sample_from_logits(
        logits,
        torch.full((n,), kw.get("temperature", 1.0)),
        torch.full((n,), int(kw.get("top_k", 0)), dtype=torch.int32),
        torch.full((n,), kw.get("top_p", 1.0)),
        torch.full((n,), kw.get("min_p", 0.0)),
        noise,
    )
    return np.bincount(out.numpy(), minlength=len(probs)) / n


def _close(freq: np.ndarray, expected: list[float], n: int = 6000) -> None:
    exp = np.array(expected) / sum(expected)
    tol = 4 * np.sqrt(exp * (1 - exp) / n) + 1e-9
    assert (np.abs(freq - exp) <= tol).all(), (freq, exp)


P = [0.5, 0.3, 0.15, 0.05]


def test_greedy_is_argmax_with_ties_to_lowest_id() -> None:
    logits = torch.tensor([[0.0, 3.0, 3.0, 1.0, 0, 0, 0, 0], [5.0, 0, 0, 0, 0, 0, 0, 5.0]])
    g = SamplingParams(temperature=0.0)
    assert _sample([(g, [1], []), (g, [1], [])], logits) == [1, 0]


def test_temperature_one_follows_the_distribution() -> None:
    _close(_draws(P), P)


def test_temperature_sharpens() -> None:
    _close(_draws(P, temperature=0.5), [p**2 for p in P])


def test_top_k_keeps_k_tokens_renormalized() -> None:
    freq = _draws(P, top_k=2)
    assert freq[2] == freq[3] == 0
    _close(freq, [0.5, 0.3, 0, 0])


def test_top_p_keeps_smallest_set_reaching_p() -> None:
    # Mass before token 2 is 0.8 >= 0.7: tokens 2 and 3 go.
    freq = _draws(P, top_p=0.7)
    assert freq[2] == freq[3] == 0
    _close(freq, [0.5, 0.3, 0, 0])
    freq = _draws(P, top_p=0.85)  # mass before token 3 is 0.95 >= 0.85
    assert freq[3] == 0 and freq[2] > 0


def test_min_p_drops_tokens_below_fraction_of_max() -> None:
    freq = _draws(P, min_p=0.2)  # threshold 0.1: only token 3 (0.05) goes
    assert freq[3] == 0
    _close(freq, [0.5, 0.3, 0.15, 0])


def test_repetition_penalty_over_prompt_and_outputs() -> None:
    logits = torch.tensor([[2.0, -2.0, 2.0, -2.0, 1.0]])
    prompt = token_counts(torch.tensor([[0, 5]]), 5) > 0  # token 0 in the prompt (5 = pad)
    out = token_counts(torch.tensor([[1, 1]]), 5)  # token 1 twice in the outputs
    z, one = torch.zeros(1), torch.ones(1)
    got = apply_penalties(logits, prompt, out, z, z, torch.tensor([2.0]))
    assert got.tolist() == [[1.0, -4.0, 2.0, -2.0, 1.0]]
    got = apply_penalties(logits, prompt, out, torch.tensor([0.5]), torch.tensor([0.25]), one)
    # presence and frequency see outputs only: token 0 (prompt) untouched, token 1: -0.5 - 0.5
    assert got.tolist() == [[2.0, -3.0, 2.0, -2.0, 1.0]]


def test_penalties_through_the_sampler_change_greedy_choice() -> None:
    logits = torch.tensor([[0.0, 3.0, 2.5, 0, 0, 0, 0, 0]])
    base = SamplingParams(temperature=0.0)
    assert _sample([(base, [1], [])], logits) == [1]
    assert _sample([(base.clone(repetition_penalty=1.5), [1], [])], logits) == [2]  # prompt
    assert _sample([(base.clone(presence_penalty=1.0), [5], [1])], logits) == [2]  # output
    assert _sample([(base.clone(presence_penalty=1.0), [1], [])], logits) == [1]  # prompt only


def test_logit_bias_and_allowed_token_ids() -> None:
    logits = torch.tensor([[0.0, 3.0, 2.5, 1.0, 0, 0, 0, 0]])
    g = SamplingParams(temperature=0.0)
    assert _sample([(g.clone(logit_bias={3: 2.5}), [0], [])], logits) == [3]
    assert _sample([(g.clone(allowed_token_ids=[0, 2]), [0], [])], logits) == [2]
    rnd = SamplingParams(temperature=1.0, allowed_token_ids=[4, 5])
    assert set(_sample([(rnd, [0], [])] * 50, logits.expand(50, -1))) <= {4, 5}


def test_bad_words_ban_last_token_when_prefix_matches() -> None:
    logits = torch.tensor([[0.0, 3.0, 2.5, 1.0, 0, 0, 0, 0]])
    single = SamplingParams(temperature=0.0, bad_words_token_ids=[[1]])
    assert _sample([(single, [0], [])], logits) == [2]
    multi = SamplingParams(temperature=0.0, bad_words_token_ids=[[6, 7, 1]])
    assert _sample([(multi, [0], [5, 6, 7])], logits) == [2]  # outputs end with 6 7
    assert _sample([(multi, [6, 7], [])], logits) == [1]  # the prompt does not count
    assert _sample([(multi, [0], [7, 6])], logits) == [1]


def test_min_tokens_masks_eos_and_stop_ids() -> None:
    logits = torch.tensor([[0.0, 3.0, 2.5, 2.0, 0, 0, 0, 0]])
    p = SamplingParams(temperature=0.0, min_tokens=2, stop_token_ids=[2])
    assert _sample([(p, [0], [4])], logits, eos=1) == [3]  # 1 output < 2: eos 1 and stop 2 banned
    assert _sample([(p, [0], [4, 4])], logits, eos=1) == [1]  # reached min_tokens
    assert _sample([(p.clone(ignore_eos=True), [0], [4])], logits, eos=1) == [1]


def test_seeded_rows_replay_regardless_of_batch() -> None:
    torch.manual_seed(0)
    logits = torch.randn(1, V).expand(6, -1).contiguous()
    seeded = SamplingParams(temperature=1.0, seed=1234)
    other = SamplingParams(temperature=1.0)
    alone = _sample([(seeded, [0], [3, 3])], logits[:1])
    mixed = _sample([(other, [0], []), (seeded, [0], [3, 3]), (other, [1], [2])], logits[:3])
    assert mixed[1] == alone[0]
    # Over many positions the seeded stream is a real sample, not a constant.
    toks = [_sample([(seeded, [0], [3] * k)], logits[:1])[0] for k in range(40)]
    assert len(set(toks)) > 1
    assert toks == [_sample([(seeded, [0], [3] * k)], logits[:1])[0] for k in range(40)]


def test_seed_mixing_separates_seeds_and_positions() -> None:
    values = {seed_for_position(s, p) for s in range(20) for p in range(20)}
    assert len(values) == 400
    assert all(0 <= v < 2**64 for v in values)
    assert seed_for_position(-1, 0) != seed_for_position(1, 0)


def test_seeded_uniforms_are_the_hash_for_all_rows_at_once() -> None:
    from actorllm.worker.sampler import _to_int64, seeded_uniforms

    seeds = [0, 1, -1, 2**63 - 1, -(2**63), 2**64 - 1, 12345]
    positions = [0, 5, 7, 100, 3, 9, 0]
    u = seeded_uniforms([_to_int64(s) for s in seeds], positions)
    pairs = zip(seeds, positions, strict=True)
    want = [(seed_for_position(s, p) >> 40) * 2.0**-24 for s, p in pairs]
    assert u.dtype == np.float32 and u.tolist() == want  # exact: 24-bit values
    many = seeded_uniforms(list(range(4096)), [0] * 4096)
    assert many.min() >= 0.0 and many.max() < 1.0 and abs(float(many.mean()) - 0.5) < 0.02


def test_logprobs_are_raw_with_rank() -> None:
    logits = torch.tensor([[0.0, 3.0, 2.5, 1.0, 0, 0, 0, 0]])
    p = SamplingParams(temperature=0.5, logprobs=2, logit_bias={3: 100.0}, seed=5)
    batch, slots = _batch([(p, [0], [])])
    out = Sampler(V, CPU)(logits.clone(), build_sampling_metadata(batch, slots, V, CPU))
    assert out.sampled_token_ids.tolist() == [3]  # the bias decides the sample...
    assert out.logprobs is not None
    raw = logits.log_softmax(-1)[0]
    # ...but logprobs are the model's raw ones: sampled token first, then the top-2.
    assert out.logprobs.token_ids.tolist() == [[3, 1, 2]]
    assert out.logprobs.logprobs[0].tolist() == pytest.approx(
        [raw[3].item(), raw[1].item(), raw[2].item()]
    )
    assert out.logprobs.ranks.tolist() == [3]
    assert math.isclose(sum(raw.exp().tolist()), 1.0, rel_tol=1e-5)


def test_logprob_token_ids_are_the_full_log_softmax_at_those_ids() -> None:
    torch.manual_seed(0)
    logits = torch.randn(3, V)
    rows: list[tuple[SamplingParams, list[int], list[int]]] = [
        (SamplingParams(temperature=0.0, logprob_token_ids=[6, 0, 2]), [0], []),
        (SamplingParams(temperature=0.0, logprobs=1), [0], []),  # top-k beside it
        (SamplingParams(temperature=0.0, logprobs=1, logprob_token_ids=[5]), [0], []),
    ]
    batch, slots = _batch(rows)
    meta = build_sampling_metadata(batch, slots, V, CPU)
    assert meta.max_num_logprobs == 1  # rows with logprob_token_ids take no top-k
    out = Sampler(V, CPU)(logits.clone(), meta)
    raw = logits.log_softmax(-1)
    chosen = raw.argmax(-1).tolist()
    assert out.sampled_token_ids.tolist() == chosen
    assert out.logprobs is not None
    ids, lps = out.logprobs.token_ids.tolist(), out.logprobs.logprobs
    assert ids[0][:4] == [chosen[0], 6, 0, 2]
    assert lps[0, :4].tolist() == pytest.approx(raw[0, [chosen[0], 6, 0, 2]].tolist())
    assert ids[1][:2] == [chosen[1], raw[1].argmax().item()]  # its top-1, unchanged
    assert ids[2][:2] == [chosen[2], 5]
    assert lps[2, 1].item() == pytest.approx(raw[2, 5].item())
    assert out.logprobs.ranks.tolist() == [1, 1, 1]


def test_logprob_token_ids_alone_turn_logprobs_on() -> None:
    logits = torch.tensor([[0.0, 3.0, 2.5, 1.0, 0, 0, 0, 0]])
    p = SamplingParams(temperature=0.5, logprob_token_ids=[7], seed=1)
    batch, slots = _batch([(p, [0], [])])
    out = Sampler(V, CPU)(logits.clone(), build_sampling_metadata(batch, slots, V, CPU))
    assert out.logprobs is not None
    assert out.logprobs.token_ids[0, 1].item() == 7
    assert out.logprobs.logprobs[0, 1].item() == pytest.approx(logits.log_softmax(-1)[0, 7].item())
