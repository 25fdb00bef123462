"""The sampler with a watermark: which rows draw with it, what they draw, and what stays.

A watermarked row's token is ``argmax(processed logits + keyed Gumbel noise)``, the
processed logits being vLLM's (masks, penalties, temperature, min-p, top-k, top-p);
everything else (greedy rows, opted-out rows, logprobs) is what it is without one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler_output import NewRequestData
from actorllm.core.watermark_config import WatermarkConfig
from actorllm.kernels.watermark_sample import gumbel_watermark_sample
from actorllm.worker.input_batch import InputBatch
from actorllm.worker.sampler import Sampler
from actorllm.worker.sampling_metadata import build_sampling_metadata, needs_token_history

CPU = torch.device("cpu")
V = 64
CONFIG = WatermarkConfig(key=99, context_width=2)


def _batch(rows: list[tuple[SamplingParams, list[int]]]) -> tuple[InputBatch, np.ndarray]:
    """Rows of (params, outputs so far), each after the prompt [1, 2, 3]."""
    batch = InputBatch(max_num_seqs=len(rows) + 2, max_model_len=64, block_size=4)
    for i, (params, outputs) in enumerate(rows):
        batch.add_request(
            NewRequestData(
                req_id=f"r{i}", prompt_token_ids=[1, 2, 3], output_token_ids=outputs,
                sampling_params=params, block_ids=([],), num_computed_tokens=0,
                eos_token_id=None,
            )
        )  # fmt: skip
    return batch, np.arange(len(rows))


def _sample(
    rows: list[tuple[SamplingParams, list[int]]], logits: torch.Tensor, config=CONFIG
) -> list[int]:
    batch, slots = _batch(rows)
    meta = build_sampling_metadata(batch, slots, V, CPU, watermark=config)
    sampler = Sampler(V, CPU, seed=0, watermark=config)
    return sampler(logits.clone(), meta).sampled_token_ids.tolist()


def _on(**kw) -> SamplingParams:
    return SamplingParams(watermarking=True, **kw)


LOGITS = torch.randn(4, V, generator=torch.Generator().manual_seed(0))


def test_a_watermarked_row_draws_the_gumbel_max_of_its_context() -> None:
    got = _sample([(_on(temperature=0.7), [5, 6, 7])], LOGITS[:1])
    contexts = torch.tensor([[6, 7]])  # the last two generated tokens
    assert got == gumbel_watermark_sample(LOGITS[:1] / 0.7, contexts, CONFIG.key).tolist()


def test_the_first_token_reads_no_prompt() -> None:
    got = _sample([(_on(), [])], LOGITS[:1])
    assert got == gumbel_watermark_sample(LOGITS[:1], torch.tensor([[-1, -1]]), 99).tolist()


def test_other_rows_draw_as_without_a_watermark() -> None:
    rows = [
        (_on(seed=1), [4]),
        (SamplingParams(seed=2, watermarking=False), [4]),
        (SamplingParams(temperature=0.0, watermarking=True), [4]),  # greedy: never
    ]
    with_wm = _sample(rows, LOGITS[:3])
    plain = _sample(rows, LOGITS[:3], config=None)
    assert with_wm[1:] == plain[1:]
    assert with_wm[2] == int(LOGITS[2].argmax())


def test_masks_and_filters_bind_the_watermarked_draw() -> None:
    allowed = [(_on(allowed_token_ids=[3, 9]), [])]
    assert _sample(allowed, LOGITS[:1])[0] in (3, 9)
    top1 = [(_on(top_k=1), [8, 8])]
    assert _sample(top1, LOGITS[:1]) == [int(LOGITS[0].argmax())]


def test_a_repeated_context_draws_without_the_watermark() -> None:
    """Context (5, 6) already preceded an output position: the row is not watermarked (its
    seeded draw is the plain sampler's)."""
    rows = [(_on(seed=3), [5, 6, 1, 5, 6])]
    batch, slots = _batch(rows)
    assert build_sampling_metadata(batch, slots, V, CPU, watermark=CONFIG).watermark is None
    assert _sample(rows, LOGITS[:1]) == _sample(rows, LOGITS[:1], config=None)


def test_logprobs_are_the_raw_ones() -> None:
    rows = [(_on(logprobs=3), [2, 5])]
    batch, slots = _batch(rows)
    meta = build_sampling_metadata(batch, slots, V, CPU, watermark=CONFIG)
    out = Sampler(V, CPU, watermark=CONFIG)(LOGITS[:1].clone(), meta)
    assert out.logprobs is not None
    raw = LOGITS[:1].log_softmax(-1)
    token = int(out.sampled_token_ids[0])
    assert torch.allclose(out.logprobs.logprobs[0, 0], raw[0, token])


def test_watermarked_rows_need_their_outputs_on_the_host() -> None:
    batch, slots = _batch([(_on(), [1])])
    assert needs_token_history(batch, slots)
    batch, slots = _batch([(SamplingParams(), [1])])
    assert not needs_token_history(batch, slots)


def test_a_wide_context_warns_as_vllm() -> None:
    with pytest.warns(UserWarning, match="reduce robustness to edits"):
        Sampler(V, CPU, watermark=WatermarkConfig(key=1, context_width=17))
