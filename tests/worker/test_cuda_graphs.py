"""CUDA-graph batch ladder and decode padding, checked on CPU (graphs themselves need CUDA).

Padding must be invisible: a padded decode batch run eagerly gives the same hidden rows for
the real requests and writes no KV outside their slots.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler_output import NewRequestData
from actorllm.worker.cuda_graphs import graph_batch_sizes, pad_decode_plan, padded_batch_size
from actorllm.worker.input_batch import InputBatch
from actorllm.worker.model_runner import ModelRunner
from actorllm.worker.step_inputs import InputPlan, plan_step, plan_to_device
from tests.helpers.models import make_tiny_checkpoint


def test_ladder_and_padded_sizes() -> None:
    assert graph_batch_sizes(1) == [1]
    assert graph_batch_sizes(8) == [1, 2, 4, 8]
    assert graph_batch_sizes(48) == [1, 2, 4, 8, 16, 32, 48]
    assert graph_batch_sizes(1024, cap=100) == [1, 2, 4, 8, 16, 32, 64, 100]
    assert graph_batch_sizes(0) == []
    sizes = graph_batch_sizes(48)
    assert [padded_batch_size(n, sizes) for n in (1, 3, 4, 5, 33, 48)] == [1, 4, 4, 8, 48, 48]
    assert padded_batch_size(49, sizes) is None


def _batch() -> InputBatch:
    b = InputBatch(max_num_seqs=8, max_model_len=32, block_size=4)
    sp = SamplingParams(temperature=0.0)
    for k, (rid, n) in enumerate([("a", 5), ("b", 2), ("c", 9)]):
        b.add_request(
            NewRequestData(req_id=rid, prompt_token_ids=list(range(10 + k, 10 + k + n)),
                           output_token_ids=[], sampling_params=sp,
                           block_ids=([3 * k + 1, 3 * k + 2, 3 * k + 3],),
                           num_computed_tokens=n - 1)
        )  # fmt: skip
    return b


def test_pad_decode_plan_points_padding_at_nothing() -> None:
    plan = plan_step(_batch(), {"a": 1, "b": 1, "c": 1})
    assert plan.is_decode
    p = pad_decode_plan(plan, 8)
    assert p.input_ids[:3].tolist() == plan.input_ids.tolist()
    assert p.slot_mapping.tolist() == [*plan.slot_mapping.tolist(), *[-1] * 5]
    assert p.query_start_loc.tolist() == list(range(9))
    assert p.seq_lens.tolist() == [*plan.seq_lens.tolist(), *[1] * 5]
    assert p.block_table.shape == (8, plan.block_table.shape[1])
    assert (p.block_table[3:] == 0).all() and (p.block_table[:3] == plan.block_table).all()
    # What sampling reads stays the real requests'.
    assert p.req_ids == plan.req_ids and p.sample_hidden_rows.tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="pad"):
        pad_decode_plan(plan, 2)
    with pytest.raises(ValueError, match="decode"):
        pad_decode_plan(_prefill_plan(), 8)


def _prefill_plan() -> InputPlan:
    b = _batch()
    b.num_computed_tokens[:] = 0
    return plan_step(b, {"a": 5})


def test_padded_forward_is_invisible(tmp_path: Path) -> None:
    path = make_tiny_checkpoint(tmp_path, "llama")
    r = ModelRunner(path, dtype="float32", block_size=4, max_num_seqs=8, max_model_len=32)
    r.load_model()
    r.initialize_kv_cache(12)
    model = r.model
    assert model is not None
    for k_cache, v_cache in r.kv_caches:  # recognisable contents: nothing may change them
        k_cache.normal_()
        v_cache.normal_()
    plan = plan_step(_batch(), {"a": 1, "b": 1, "c": 1})
    before = [(k.clone(), v.clone()) for k, v in r.kv_caches]
    with torch.inference_mode():
        step, _, _ = plan_to_device(plan, r.device)
        want = model(step.input_ids, step.positions, step.attn_metadata, r.kv_caches)
        after_eager = [(k.clone(), v.clone()) for k, v in r.kv_caches]
        for (k, v), (k0, v0) in zip(r.kv_caches, before, strict=True):
            k.copy_(k0)
            v.copy_(v0)
        padded, _, _ = plan_to_device(pad_decode_plan(plan, 8), r.device)
        got = model(padded.input_ids, padded.positions, padded.attn_metadata, r.kv_caches)
    assert got.shape[0] == 8
    # Same rows up to matmul blocking at another M (fp32 rounding, not padding leaking in).
    torch.testing.assert_close(got[:3], want, rtol=0, atol=2e-5)
    real = torch.from_numpy(plan.slot_mapping)
    others = torch.ones(12 * 4, dtype=torch.bool)
    others[real] = False
    for (k, v), (k0, v0), (k1, v1) in zip(r.kv_caches, before, after_eager, strict=True):
        for c, c0, c1 in ((k, k0, k1), (v, v0, v1)):
            flat, flat0, flat1 = (x.reshape(12 * 4, -1) for x in (c, c0, c1))
            assert torch.equal(flat[others], flat0[others])  # padding wrote no KV anywhere
            torch.testing.assert_close(flat[real], flat1[real], rtol=0, atol=2e-5)


def test_graphs_off_on_cpu_and_with_enforce_eager(tmp_path: Path) -> None:
    path = make_tiny_checkpoint(tmp_path, "llama")
    r = ModelRunner(path, dtype="float32", block_size=4, max_model_len=32)
    assert not r.graphs_enabled and r.launcher.buffers is None  # CPU: plain tensors
    r = ModelRunner(path, dtype="float32", block_size=4, max_model_len=32, enforce_eager=True)
    assert not r.graphs_enabled
