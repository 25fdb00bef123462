"""The sampler takes the LM head's bfloat16 logits as they are (``compute_logits(...,
float32=False)``, what the runner asks for): the same tokens and logprobs as with their
float32 widening, for greedy, tempered, filtered, penalised and logprob rows; and the
models' ``compute_logits`` keeps the dtype only where asked."""

from __future__ import annotations

import numpy as np
import torch

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler_output import NewRequestData
from actorllm.models.config import CheckpointConfig
from actorllm.models.loader import load_model
from actorllm.worker.input_batch import InputBatch
from actorllm.worker.sampler import Sampler
from actorllm.worker.sampling_metadata import SamplingMetadata, build_sampling_metadata

CPU = torch.device("cpu")
V = 300


def _meta(params: list[SamplingParams]) -> SamplingMetadata:
    batch = InputBatch(max_num_seqs=len(params) + 2, max_model_len=64, block_size=4)
    for i, p in enumerate(params):
        batch.add_request(
            NewRequestData(
                req_id=f"r{i}",
                prompt_token_ids=[1, 2, 3],
                output_token_ids=[4],
                sampling_params=p,
                block_ids=([],),
                num_computed_tokens=0,
                eos_token_id=None,
            )
        )
    return build_sampling_metadata(batch, np.arange(len(params)), V, CPU)


def _both(params: list[SamplingParams]) -> None:
    g = torch.Generator().manual_seed(len(params))
    logits = (torch.randn(len(params), V, generator=g) * 3).bfloat16()  # [N, V]
    a = Sampler(V, CPU, seed=7)(logits.clone(), _meta(params))
    b = Sampler(V, CPU, seed=7)(logits.float(), _meta(params))
    assert torch.equal(a.sampled_token_ids, b.sampled_token_ids)
    assert (a.logprobs is None) == (b.logprobs is None)
    if a.logprobs is not None and b.logprobs is not None:
        assert torch.equal(a.logprobs.logprobs, b.logprobs.logprobs)


def test_plain_and_greedy_rows() -> None:
    rows = [SamplingParams(temperature=0.6, max_tokens=4) for _ in range(20)]
    rows += [SamplingParams(temperature=0.0, max_tokens=4), SamplingParams(seed=3)]
    _both(rows)
    _both([SamplingParams(temperature=0.0, max_tokens=4)] * 3)


def test_filters_penalties_and_logprobs_widen_first() -> None:
    _both([SamplingParams(temperature=0.8, top_k=5), SamplingParams(top_p=0.5)])
    _both([SamplingParams(temperature=0.8, presence_penalty=0.5, repetition_penalty=1.2)])
    _both([SamplingParams(temperature=0.7, logprobs=3), SamplingParams(temperature=0.7)])


def test_compute_logits_keeps_the_dtype_only_where_asked() -> None:
    cfg = CheckpointConfig.from_dict(
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": 64,
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "intermediate_size": 48,
        }
    )
    model = load_model("", cfg, dtype="bfloat16", load_format="dummy")
    hidden = torch.randn(3, 32).bfloat16()
    with torch.inference_mode():
        wide = model.compute_logits(hidden)
        kept = model.compute_logits(hidden, float32=False)
    assert wide.dtype == torch.float32 and kept.dtype == torch.bfloat16
    assert torch.equal(kept.float(), wide)
