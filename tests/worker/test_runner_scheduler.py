"""The runner driven by the real ``core.scheduler.Scheduler``: greedy parity with HF under
preemption (a tiny block pool), prefix caching, chunked prefill, and async scheduling."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from actorllm.core.request import Request, RequestStatus
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
    _assert_hf_parity(path, swa.prompts, swa.outputs)


# -- hybrid models (Gemma 2 / Gemma 3): sliding and full layers, one table per group ------


@dataclass
class _HybridRun:
    prompts: dict[str, list[int]]
    outputs: dict[str, list[int]]
    most_sliding: int  # the most blocks a decoding request held in a sliding group
    full_keeps_all: bool  # every full group always held all of its request's blocks
    peak_bytes: int  # the pool's peak use, in bytes of KV cache
    preemptions: int
    prefix_hits: int
    leaked: int  # blocks still held after every request ended


_HYBRID_BS, _HYBRID_WINDOW = 4, 8


def _hybrid_prompts() -> dict[str, list[int]]:
    g = torch.Generator().manual_seed(5)
    shared = torch.randint(3, 128, (16,), generator=g).tolist()
    return {
        "a": [*shared, 9],
        "b": [*shared, 11, 12],  # a prefix hit: full group from the start, sliding its window
        "c": torch.randint(3, 128, (21,), generator=g).tolist(),
        "d": torch.randint(3, 128, (18,), generator=g).tolist(),
    }


def _hybrid_run(
    path: Path,
    hybrid: bool,
    kv_bytes: int,
    async_scheduling: bool = False,
    abort_after: int | None = None,
) -> _HybridRun:
    """A Gemma model through the real scheduler over a ``kv_bytes`` cache (the same memory
    whether or not sliding layers get their own table), blocks counted per step."""
    bs, max_len = _HYBRID_BS, 64
    runner = ModelRunner(
        path, dtype="float32", block_size=bs, max_num_seqs=4, max_model_len=max_len,
        hybrid_kv_cache=hybrid,
    )  # fmt: skip
    runner.load_model()
    per_block = runner.kv_cache_bytes_per_block()
    num_blocks = kv_bytes // per_block
    runner.initialize_kv_cache(num_blocks)
    windows = runner.kv_group_windows
    assert (len(windows) > 1) == hybrid
    cfg = SchedulerConfig(
        max_num_seqs=4, max_num_batched_tokens=12, max_model_len=max_len, block_size=bs,
        num_blocks=num_blocks, async_scheduling=async_scheduling,
        kv_group_windows=windows if hybrid else None, sliding_window=None,
    )  # fmt: skip
    sched = Scheduler(cfg)
    prompts = _hybrid_prompts()
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    for rid, p in prompts.items():
        sched.add_request(Request(rid, p, params))
    kv = sched.kv_cache_manager
    most, peak, full_ok, steps = 0, 0, True, 0

    def count(so: SchedulerOutput) -> None:
        nonlocal most, peak, full_ok, steps
        steps += 1
        peak = max(peak, kv.num_usable_blocks - kv.num_free_blocks)
        for rid in so.num_scheduled_tokens:
            req = sched.requests[rid]
            for g, window in enumerate(windows):
                held = kv.num_held_blocks(rid, g)
                if window is None:
                    full_ok &= held == -(-req.num_computed_tokens // bs)
                elif so.num_scheduled_tokens[rid] == 1:  # decoding: its window only
                    most = max(most, held)
        if abort_after is not None and steps == abort_after:
            sched.finish_requests(["c"], RequestStatus.FINISHED_ABORTED)

    outputs = _run(runner, sched, async_scheduling, on_schedule=count)
    st = sched.statistics()
    leaked = kv.num_usable_blocks - kv.num_free_blocks
    return _HybridRun(
        prompts, outputs, most, full_ok, peak * per_block, st.num_preemptions,
        st.prefix_cache_hits, leaked,
    )  # fmt: skip


def _assert_hf_parity(
    path: Path,
    prompts: dict[str, list[int]],
    outputs: dict[str, list[int]],
    skip: tuple[str, ...] = (),
) -> None:
    """Every request but ``skip`` got its 24 tokens, each HF's greedy choice."""
    hf = load_hf_model(path)
    for rid, out in outputs.items():
        if rid in skip:
            continue
        assert len(out) == 24, rid
        prompt = prompts[rid]
        ref = hf_logprobs(hf, prompt + out)
        for i, tok in enumerate(out):
            row = ref[len(prompt) + i - 1]
            assert row[tok] >= row.max() - 1e-4, f"{rid}: token {i} differs from HF"


@pytest.fixture(scope="module", params=["gemma2", "gemma3"])
def gemma(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two layers: one sliding (window 8), one full."""
    return make_tiny_checkpoint(
        tmp_path_factory.mktemp(request.param), request.param, num_kv_heads=2,
        sliding_window=_HYBRID_WINDOW,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_hybrid_sliding_group_frees_blocks_and_parity_holds(
    gemma: Path, async_scheduling: bool
) -> None:
    """Gemma 2 / Gemma 3 text: a request 40+ tokens long holds at most window / block_size
    + 1 blocks in the sliding group while the full group holds all of them; chunked prefill
    (a 12-token budget), prefix hits and greedy parity with HF hold. Over the same bytes of
    KV cache, one shared table needs more memory at its peak."""
    # One layer's block: K and V x 4 positions x 2 heads x 16 dims x 4 bytes = 1 KiB, so
    # 128 one-layer blocks (hybrid) or 64 two-layer blocks (one table).
    kv_bytes = 128 * 1024
    hybrid = _hybrid_run(gemma, True, kv_bytes, async_scheduling)
    assert hybrid.most_sliding <= _HYBRID_WINDOW // _HYBRID_BS + 1
    assert hybrid.full_keeps_all
    assert hybrid.prefix_hits > 0
    assert hybrid.leaked == 0
    shared = _hybrid_run(gemma, False, kv_bytes, async_scheduling)
    assert hybrid.peak_bytes < shared.peak_bytes
    assert hybrid.outputs == shared.outputs
    _assert_hf_parity(gemma, hybrid.prompts, hybrid.outputs)


@pytest.mark.slow
def test_hybrid_preemption_frees_both_groups(gemma: Path) -> None:
    """A pool too small for four requests at once: preemptions free the blocks of both
    groups (nothing leaks) and the recomputed requests still match HF."""
    run = _hybrid_run(gemma, True, kv_bytes=32 * 1024)  # 32 one-layer blocks
    assert run.preemptions > 0
    assert run.leaked == 0
    _assert_hf_parity(gemma, run.prompts, run.outputs)


@pytest.mark.slow
def test_hybrid_abort_leaks_no_block(gemma: Path) -> None:
    run = _hybrid_run(gemma, True, kv_bytes=2 * 64 * 1024, abort_after=6)
    assert run.leaked == 0
    assert len(run.outputs.get("c", [])) < 24
    _assert_hf_parity(gemma, run.prompts, run.outputs, skip=("c",))
