"""The runner driven by the real ``core.scheduler.Scheduler``: greedy parity with HF under
preemption (a tiny block pool), prefix caching, chunked prefill, and async scheduling."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from actorllm.core.request import Request
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler import Scheduler, SchedulerConfig
from actorllm.core.scheduler_output import SchedulerOutput
from actorllm.worker.model_runner import ModelRunner
from tests.helpers.models import hf_logprobs, load_hf_model, make_tiny_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_checkpoint(tmp_path_factory.mktemp("ckpt"), "qwen3", num_kv_heads=2)


def _run(
    runner: ModelRunner,
    sched: Scheduler,
    async_scheduling: bool,
    on_schedule: Callable[[SchedulerOutput], None] | None = None,
) -> dict[str, list[int]]:
    outputs: dict[str, list[int]] = {}
    in_flight: deque = deque()
    depth = 2 if async_scheduling else 1
    for _ in range(500):
        if not sched.has_unfinished_requests() and not in_flight:
            return outputs
        if sched.has_unfinished_requests():
            so = sched.schedule()
            if on_schedule is not None:
                on_schedule(so)
            # The worker thread runs steps in order, so executing now is what it would do.
            in_flight.append((so, runner.execute(so)))
        if len(in_flight) >= depth or not sched.has_unfinished_requests():
            so, out = in_flight.popleft()
            for o in sched.update_from_output(so, out).outputs:
                outputs.setdefault(o.req_id, []).extend(o.new_token_ids)
    raise AssertionError("did not finish")


@pytest.mark.slow
@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_parity_under_real_scheduler(checkpoint: Path, async_scheduling: bool) -> None:
    bs, num_blocks, max_len = 4, 14, 48  # 13 usable blocks: the pool runs dry
    runner = ModelRunner(
        checkpoint, dtype="float32", block_size=bs, max_num_seqs=8, max_model_len=max_len
    )
    runner.load_model()
    runner.initialize_kv_cache(num_blocks)
    sched = Scheduler(
        SchedulerConfig(
            max_num_seqs=8,
            max_num_batched_tokens=10,
            max_model_len=max_len,
            block_size=bs,
            num_blocks=num_blocks,
            enable_prefix_caching=True,
            async_scheduling=async_scheduling,
        )
    )
    g = torch.Generator().manual_seed(3)
    shared = torch.randint(3, 128, (12,), generator=g).tolist()
    prompts = {
        "a": [*shared, 9, 10],
        "b": [*shared, 11],  # prefix hit on a's first blocks
        "c": torch.randint(3, 128, (17,), generator=g).tolist(),
        "d": torch.randint(3, 128, (5,), generator=g).tolist(),
    }
    params = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)
    for rid, p in prompts.items():
        sched.add_request(Request(rid, p, params))
    outputs = _run(runner, sched, async_scheduling)
    stats = sched.statistics()
    assert stats.num_preemptions > 0
    assert stats.prefix_cache_hits > 0
    hf = load_hf_model(checkpoint)
    for rid, prompt in prompts.items():
        out = outputs[rid]
        assert len(out) == 10, rid
        ref = hf_logprobs(hf, prompt + out)
        for i, tok in enumerate(out):
            row = ref[len(prompt) + i - 1]
            assert row[tok] >= row.max() - 1e-4, f"{rid}: token {i} differs from HF"


@dataclass
class _SwaRun:
    prompts: dict[str, list[int]]
    outputs: dict[str, list[int]]
    most: int  # the most blocks one decoding request held
    peak: int  # the pool's peak blocks in use
    preemptions: int
    prefix_hits: int


def _mistral_run(path: Path, window: int | None, async_scheduling: bool) -> _SwaRun:
    """Mistral (every layer sliding) through the real scheduler, blocks counted per step."""
    bs, num_blocks, max_len = 4, 24, 64
    runner = ModelRunner(
        path, dtype="float32", block_size=bs, max_num_seqs=4, max_model_len=max_len
    )
    runner.load_model()
    runner.initialize_kv_cache(num_blocks)
    cfg = SchedulerConfig(
        max_num_seqs=4, max_num_batched_tokens=12, max_model_len=max_len, block_size=bs,
        num_blocks=num_blocks, async_scheduling=async_scheduling, sliding_window=window,
    )  # fmt: skip
    sched = Scheduler(cfg)
    g = torch.Generator().manual_seed(5)
    shared = torch.randint(3, 128, (16,), generator=g).tolist()
    prompts = {
        "a": [*shared, 9],
        "b": [*shared, 11, 12],  # a prefix hit, partly behind the window by now
        "c": torch.randint(3, 128, (21,), generator=g).tolist(),
    }
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    for rid, p in prompts.items():
        sched.add_request(Request(rid, p, params))
    kv = sched.kv_cache_manager
    most, peak = 0, 0

    def count(so: SchedulerOutput) -> None:
        nonlocal most, peak
        peak = max(peak, kv.num_usable_blocks - kv.num_free_blocks)
        for rid, n in so.num_scheduled_tokens.items():
            if n == 1:  # decoding: only its window (and the slot it writes) is held
                most = max(most, kv.num_held_blocks(rid))

    outputs = _run(runner, sched, async_scheduling, on_schedule=count)
    st = sched.statistics()
    return _SwaRun(prompts, outputs, most, peak, st.num_preemptions, st.prefix_cache_hits)


@pytest.mark.slow
@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_sliding_window_blocks_are_freed_and_parity_holds(
    tmp_path: Path, async_scheduling: bool
) -> None:
    """Mistral with an 8-token window: a request 40+ tokens long holds at most
    window / block_size + 1 blocks while it decodes, the freed blocks are reused by
    others (the pool is too small for full attention without preemption), and greedy
    tokens still match HF's."""
    window, bs = 8, 4
    path = make_tiny_checkpoint(tmp_path / "m", "mistral", num_kv_heads=2, sliding_window=window)
    swa = _mistral_run(path, window, async_scheduling)
    assert swa.most <= window // bs + 1
    assert swa.preemptions == 0 and swa.prefix_hits > 0
    full = _mistral_run(path, None, async_scheduling)
    assert full.most > swa.most and full.preemptions > 0
    assert swa.peak < full.peak
    hf = load_hf_model(path)
    for rid, out in swa.outputs.items():
        assert len(out) == 24, rid
        prompt = swa.prompts[rid]
        ref = hf_logprobs(hf, prompt + out)
        for i, tok in enumerate(out):
            row = ref[len(prompt) + i - 1]
            assert row[tok] >= row.max() - 1e-4, f"{rid}: token {i} differs from HF"
