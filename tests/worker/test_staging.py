"""Staging buffers, streams and the device token feed, on CPU (the CUDA variants only add
pinned memory, a copy stream and real events to the same logic)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler_output import NewRequestData
from actorllm.worker.device_feed import TokenFeed
from actorllm.worker.device_streams import DONE, DeviceStreams, to_device
from actorllm.worker.input_batch import InputBatch
from actorllm.worker.memory_profile import KVCacheMemoryError, blocks_from_profile
from actorllm.worker.staging import StepBuffers
from actorllm.worker.step_inputs import PendingInputError, plan_step

CPU = torch.device("cpu")


def _batch(prompts: dict[str, list[int]]) -> InputBatch:
    b = InputBatch(max_num_seqs=4, max_model_len=32, block_size=4)
    for k, (rid, p) in enumerate(prompts.items()):
        b.add_request(
            NewRequestData(req_id=rid, prompt_token_ids=p, output_token_ids=[],
                           sampling_params=SamplingParams(), block_ids=([4 * k + 1, 4 * k + 2],),
                           num_computed_tokens=0)
        )  # fmt: skip
    return b


def test_stage_uploads_the_plan_into_alternating_sets() -> None:
    batch = _batch({"a": [5, 6, 7], "b": [8, 9]})
    bufs = StepBuffers(DeviceStreams.for_device(CPU), 16, 4, 8)
    plan = plan_step(batch, {"a": 3, "b": 2})
    s0 = bufs.stage(plan)
    m = s0.inputs.attn_metadata
    assert s0.inputs.input_ids.tolist() == [5, 6, 7, 8, 9]
    assert s0.inputs.positions.tolist() == [0, 1, 2, 0, 1]
    assert m.query_start_loc.tolist() == [0, 3, 5] and m.seq_lens.tolist() == [3, 2]
    assert m.block_table.tolist() == [[1], [5]]
    assert m.slot_mapping.tolist() == [4, 5, 6, 20, 21]
    assert s0.inputs.sample_hidden_rows.tolist() == [2, 4] and s0.fill_rows.numel() == 0
    # The device tensors are slices of the persistent buffers, not fresh allocations.
    dev0 = bufs.sets[0].dev["input_ids"]
    assert s0.inputs.input_ids.data_ptr() == dev0.data_ptr()
    s1 = bufs.stage(plan_step(batch, {"a": 1}))
    assert s1.buffer_set == 1 and s1.inputs.input_ids.tolist() == [5]
    assert s0.inputs.input_ids.tolist() == [5, 6, 7, 8, 9]  # set 0 untouched by step 1
    assert bufs.stage(plan).buffer_set == 0


def test_stage_rejects_oversized_plans() -> None:
    batch = _batch({"a": list(range(1, 9))})
    bufs = StepBuffers(DeviceStreams.for_device(CPU), 4, 4, 8)
    plan = plan_step(batch, {"a": 8})
    assert not bufs.fits(plan)
    with pytest.raises(ValueError, match="exceeds"):
        bufs.stage(plan)


def test_pending_tokens_are_planned_for_the_device_feed() -> None:
    batch = _batch({"a": [5, 6, 7], "b": [8, 9]})
    batch.num_computed_tokens[:2] = [3, 2]
    batch.add_pending(0, 0)  # sampled on the device, not on the host yet
    batch.add_pending(1, 1)
    plan = plan_step(batch, {"a": 1, "b": 1})
    assert plan.fill_rows.tolist() == [0, 1] and plan.fill_src.tolist() == [0, 1]
    assert plan.positions.tolist() == [3, 2] and plan.sample_mask.all()
    feed = TokenFeed(4, CPU)
    feed.record(torch.tensor([0, 1]), torch.tensor([41, 42]))
    staged = StepBuffers(DeviceStreams.for_device(CPU), 16, 4, 8).stage(plan)
    feed.fill(staged.inputs.input_ids, staged.fill_rows, staged.fill_src)
    assert staged.inputs.input_ids.tolist() == [41, 42]
    # A row moved by condense keeps pointing at the slot that sampled its token.
    batch.remove_request("a")
    assert batch.condense() == [(1, 0)]
    plan = plan_step(batch, {"b": 1})
    assert plan.fill_src.tolist() == [1]
    # Resolving writes the token on the host; the next plan reads it from there.
    assert batch.resolve_pending(0, int(batch.generation[0]), 42)
    assert plan_step(batch, {"b": 1}).fill_rows.size == 0
    assert batch.output_token_ids(0).tolist() == [42]


def test_an_older_pending_input_is_refused() -> None:
    batch = _batch({"a": [5, 6, 7]})
    batch.num_computed_tokens[0] = 3
    batch.add_pending(0, 0)
    batch.add_pending(0, 0)  # two pending: only the latest is in the feed
    with pytest.raises(PendingInputError):
        plan_step(batch, {"a": 2})


def test_resolve_skips_a_new_incarnation() -> None:
    batch = _batch({"a": [5, 6, 7]})
    gen = int(batch.generation[0])
    batch.add_pending(0, 0)
    batch.remove_request("a")
    batch.condense()
    _ = _batch  # a resumed request gets a new generation in the same slot
    batch.add_request(
        NewRequestData(req_id="a", prompt_token_ids=[5, 6, 7], output_token_ids=[],
                       sampling_params=SamplingParams(), block_ids=([1],), num_computed_tokens=0)
    )  # fmt: skip
    assert not batch.resolve_pending(0, gen, 99)
    assert batch.num_tokens[0] == 3


def test_cpu_streams_are_no_ops_and_to_device_shares_memory() -> None:
    s = DeviceStreams.for_device(CPU)
    assert not s.is_async and s.record_compute() is DONE
    dst, src = torch.zeros(3), torch.arange(3.0)
    assert s.upload([(dst, src)]) is DONE and dst.tolist() == [0.0, 1.0, 2.0]
    a = np.arange(4)
    assert to_device(a, CPU).data_ptr() == a.ctypes.data


def test_blocks_from_profile() -> None:
    gib = 2**30
    # 80 GiB device, 0.9 -> 72 GiB budget; 20 GiB torch peak; 1 GiB outside torch.
    n = blocks_from_profile(
        total=80 * gib, free=58 * gib, reserved=21 * gib, torch_peak=20 * gib,
        utilization=0.9, bytes_per_block=2**20,
    )  # fmt: skip
    assert n == (int(80 * gib * 0.9) - 20 * gib - 1 * gib) // 2**20
    with pytest.raises(KVCacheMemoryError, match="gpu_memory_utilization"):
        blocks_from_profile(total=10 * gib, free=0, reserved=10 * gib, torch_peak=9 * gib,
                            utilization=0.5, bytes_per_block=2**20)  # fmt: skip
    with pytest.raises(ValueError):
        blocks_from_profile(total=1, free=1, reserved=0, torch_peak=0, utilization=1.5,
                            bytes_per_block=1)  # fmt: skip
