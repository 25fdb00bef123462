"""The Triton backend's wiring in the worker (interpreter on CPU): attention receives the
host hints, the sampler samples with the seeded kernel, and seeded draws are a function of
(seed, position) within the backend. Greedy parity with the torch backend end to end is
``tests/kernels/test_triton_model_e2e.py``'s job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import actorllm.kernels.triton as triton_ops
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler_output import NewRequestData
from actorllm.kernels.ops import get_ops
from actorllm.worker.input_batch import InputBatch
from actorllm.worker.model_runner import ModelRunner
from actorllm.worker.sampler import Sampler
from actorllm.worker.sampling_metadata import build_sampling_metadata
from tests.helpers.models import make_tiny_checkpoint
from tests.helpers.sched_driver import SchedDriver

CPU = torch.device("cpu")
pytestmark = pytest.mark.skipif(
    not triton_ops.supports_device("cpu"), reason="needs TRITON_INTERPRET=1 (set by conftest)"
)


def test_ops_entries() -> None:
    torch_ops, tri = get_ops("torch"), get_ops("triton")
    assert not torch_ops.attention_hints and torch_ops.sample_seeded is None
    assert tri.attention_hints and tri.sample_seeded is triton_ops.sample_from_logits_seeded


def test_runner_on_triton_passes_hints_and_samples_on_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: dict[str, list[Any]] = {"attn": [], "sample": []}
    attn, sample = triton_ops.paged_attention, triton_ops.sample_from_logits_seeded

    def spy_attn(*a: Any, **kw: Any) -> torch.Tensor:
        calls["attn"].append((kw.get("max_query_len"), kw.get("max_seq_len")))
        return attn(*a, **kw)

    def spy_sample(*a: Any, **kw: Any) -> torch.Tensor:
        calls["sample"].append(a[5].tolist())  # seeds
        return sample(*a, **kw)

    monkeypatch.setattr(triton_ops, "paged_attention", spy_attn)
    monkeypatch.setattr(triton_ops, "sample_from_logits_seeded", spy_sample)
    path = make_tiny_checkpoint(tmp_path, "llama", num_layers=1)
    r = ModelRunner(path, dtype="float32", attention_backend="triton", block_size=4,
                    max_num_seqs=2, max_model_len=16)  # fmt: skip
    r.load_model()
    r.initialize_kv_cache(8)
    d = SchedDriver(r)
    d.add("g", [5, 9, 17, 33, 2], SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True))
    d.add("s", [7, 3], SamplingParams(temperature=1.0, seed=77, max_tokens=2, ignore_eos=True))
    d.run()
    assert [len(t) for t in d.outputs.values()] == [2, 2]
    # Step 0 prefills (max query 5, max seq 5); step 1 decodes (1, 6). One call per layer.
    assert calls["attn"] == [(5, 5), (1, 6)]
    assert len(calls["sample"]) == 2 and calls["sample"][0][1] == 77


def _seeded_tokens(rows: list[SamplingParams], logits: torch.Tensor) -> list[int]:
    batch = InputBatch(max_num_seqs=4, max_model_len=16, block_size=4)
    for i, p in enumerate(rows):
        batch.add_request(
            NewRequestData(req_id=f"r{i}", prompt_token_ids=[1], output_token_ids=[2, 3],
                           sampling_params=p, block_ids=([],), num_computed_tokens=0)
        )  # fmt: skip
    slots = np.arange(len(rows))
    v = logits.shape[1]
    sampler = Sampler(v, CPU, seed=0, sample_seeded=triton_ops.sample_from_logits_seeded)
    meta = build_sampling_metadata(batch, slots, v, CPU)
    return sampler(logits.clone(), meta).sampled_token_ids.tolist()


def test_seeded_kernel_draws_depend_on_seed_and_position_only() -> None:
    v = 64
    logits = torch.zeros(3, v)  # uniform: the draw is all noise
    seeded = SamplingParams(temperature=1.0, seed=2**63 + 5)  # beyond int64: wraps
    other = SamplingParams(temperature=1.0)
    alone = _seeded_tokens([seeded], logits[:1])
    assert _seeded_tokens([other, seeded, other], logits)[1] == alone[0]
    others = _seeded_tokens([seeded.clone(seed=s) for s in (6, 7, 8)], logits)
    assert others != alone * 3  # other seeds draw otherwise (all equal: p = 64^-3)
