"""The engine's per-request statistics: vLLM's definitions of each latency, fed by the core
output processor (queue time from the scheduler's first-schedule stamp, inter-token gaps
per sequence, every ending counted once; replays after a crash are not counted again)."""

from __future__ import annotations

import pytest

from actorllm.core.engine_core_output import EngineCoreOutput, EngineCoreOutputs
from actorllm.core.output_processor import OutputProcessor
from actorllm.core.request_stats import FinishedRequest, RequestStats, buckets_1_2_5
from actorllm.core.sampling_params import SamplingParams


def test_buckets_are_vllms() -> None:
    assert buckets_1_2_5(2048)[-3:] == (500.0, 1000.0, 2000.0)


def test_finished_request_phases() -> None:
    stats = RequestStats(max_model_len=100)
    stats.finished(
        FinishedRequest(
            finish_reason="length",
            arrival_time=10.0,
            scheduled_time=10.5,
            first_token_time=11.0,
            last_token_time=14.0,
            finished_time=14.5,
            prompt_tokens=7,
            generation_tokens=8,
            max_generation_tokens=4,
            n=2,
            max_tokens=4,
            num_preemptions=3,
            cached_tokens=4,
        )
    )
    h = stats.snapshot().histograms
    expect = {
        "e2e_request_latency_seconds": 4.5,
        "request_queue_time_seconds": 0.5,
        "time_to_first_token_seconds": 1.0,
        "request_prefill_time_seconds": 0.5,
        "request_decode_time_seconds": 3.0,
        "request_inference_time_seconds": 3.5,
        "time_per_output_token_seconds": 1.0,  # 3 s over the 3 tokens after the first
        "request_prompt_tokens": 7,
        "request_generation_tokens": 8,
        "request_max_num_generation_tokens": 4,
        "request_params_n": 2,
        "request_params_max_tokens": 4,
        "request_num_preemptions": 3,
        "request_prefill_kv_computed_tokens": 7 - 4,
    }
    for name, value in expect.items():
        assert (h[name].count, h[name].sum) == (1, pytest.approx(value)), name
    assert h["request_params_n"].counts[1] == 1  # the (1, 2] bucket


def test_the_output_processor_records_as_tokens_arrive() -> None:
    stats = RequestStats(max_model_len=64)
    op = OutputProcessor(None, stats=stats)
    op.add_request("r", None, [1, 2, 3], SamplingParams(max_tokens=3, n=1), arrival_time=1.0)

    def step(i: int, t: float, **kw: object) -> None:
        out = EngineCoreOutput(req_id="r", new_token_ids=[5], **kw)  # type: ignore[arg-type]
        op.process_outputs(EngineCoreOutputs(step_id=i, outputs=[out], timestamp=t))

    step(-1, 1.2)  # a replay after a crash (step_id -1): counted before the crash
    assert stats.snapshot().generation_tokens == 0
    step(0, 2.0, scheduled_time=1.5)
    step(2, 3.5, finish_reason="length")
    snap = stats.snapshot()
    h = snap.histograms
    assert (snap.prompt_tokens, snap.generation_tokens) == (3, 2)
    assert snap.request_success == {"length": 1}
    assert h["inter_token_latency_seconds"].count == 2
    assert h["inter_token_latency_seconds"].sum == pytest.approx(0.8 + 1.5)
    assert h["request_queue_time_seconds"].sum == pytest.approx(0.5)
    assert h["time_to_first_token_seconds"].sum == pytest.approx(0.2)  # the replayed token
    assert h["request_decode_time_seconds"].sum == pytest.approx(2.3)


def test_preemptions_are_the_last_count_the_scheduler_reported() -> None:
    stats = RequestStats(max_model_len=64)
    op = OutputProcessor(None, stats=stats)
    op.add_request("r", None, [1], SamplingParams(max_tokens=3), arrival_time=1.0)
    for i, preempted in enumerate([0, 1, 2]):  # each resumed output carries the count
        out = EngineCoreOutput(
            req_id="r", new_token_ids=[5], num_preemptions=preempted,
            finish_reason="length" if i == 2 else None,
        )  # fmt: skip
        op.process_outputs(EngineCoreOutputs(step_id=i, outputs=[out], timestamp=2.0 + i))
    h = stats.snapshot().histograms["request_num_preemptions"]
    assert (h.count, h.sum) == (1, 2)
    assert h.bounds == (1, 2, 3, 4, 5, 10, 20)  # vLLM's


def test_aborts_are_counted_with_their_reason() -> None:
    stats = RequestStats(max_model_len=64)
    op = OutputProcessor(None, stats=stats)
    op.add_request("r", None, [1], SamplingParams(max_tokens=3), arrival_time=1.0)
    op.abort_request("r", now=2.0)
    snap = stats.snapshot()
    assert snap.request_success == {"abort": 1}
    assert snap.histograms["e2e_request_latency_seconds"].sum == pytest.approx(1.0)
    assert snap.histograms["time_to_first_token_seconds"].count == 0  # no token came


def _ended(**kw: object) -> FinishedRequest:
    return FinishedRequest(
        finish_reason="length", arrival_time=0.0, scheduled_time=0.1, first_token_time=0.2,
        last_token_time=0.3, finished_time=0.3, prompt_tokens=2, generation_tokens=1,
        max_generation_tokens=1, n=1, max_tokens=1, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def test_requests_are_counted_by_watermark_status_only_with_a_watermark() -> None:
    from actorllm.core.watermark_config import WatermarkConfig

    stats = RequestStats(max_model_len=16, watermark=WatermarkConfig(key=1))
    for kw in ({}, {"watermarking": True}, {"greedy": True}, {"watermarking": False}):
        stats.finished(_ended(**kw))
    assert stats.snapshot().watermark_requests == {
        "watermarked": 2, "skipped": 1, "not_watermarked": 1,
    }  # fmt: skip
    plain = RequestStats(max_model_len=16)
    plain.finished(_ended(watermarking=True))
    assert plain.snapshot().watermark_requests is None
