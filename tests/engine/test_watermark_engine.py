"""--watermark-config end to end on a tiny random Llama: the detector (ours, ported from
vLLM with its PRF bit for bit) finds watermarked output and not the rest; greedy and
opted-out requests are untouched; a crash's ledger replay redraws the same tokens (the
watermark is a function of key and context, a skipped row's draw of seed and position)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from actorllm import LLM, SamplingParams
from actorllm.engine import AsyncEngine
from actorllm.testing.engine_harness import inject_fault
from actorllm.v1.metrics.reader import Counter
from actorllm.v1.watermarking import DualKeyGumbelWatermarkDetector, GumbelWatermarkDetector

PROMPTS = ["Once upon a time", "The weather today", "In a distant galaxy", "My favourite food"]
CONFIG: dict[str, Any] = {"max_model_len": 256, "kv_cache_memory_bytes": 8 * 2**20}
KEY = 1234


def _sampled(**kw: Any) -> SamplingParams:
    return SamplingParams(**{"temperature": 1.0, "max_tokens": 48, "ignore_eos": True, **kw})


@pytest.fixture(scope="module")
def llm(tiny_model):
    with LLM(tiny_model, watermark_config={"key": KEY}, seed=0, **CONFIG) as engine:
        yield engine


def test_watermarked_output_is_detected_and_the_rest_is_not(llm):
    detector = GumbelWatermarkDetector(KEY)
    marked = llm.generate(PROMPTS, _sampled(), use_tqdm=False)
    plain = llm.generate(PROMPTS, _sampled(watermarking=False), use_tqdm=False)
    for out in marked:
        got = detector.detect(list(out.outputs[0].token_ids))
        assert got.is_watermarked and got.p_value < 1e-12, got
    for out in plain:
        assert not detector.detect(list(out.outputs[0].token_ids)).is_watermarked
    wrong_key = GumbelWatermarkDetector(KEY + 1)
    assert not wrong_key.detect(list(marked[0].outputs[0].token_ids)).is_watermarked


def test_the_watermark_is_a_function_of_key_and_context(llm):
    """Unseeded, the watermarked draw still repeats itself: no random number is read
    (the deduplication skips no row of a 48-token random-model output here)."""
    first = llm.generate(PROMPTS[:2], _sampled(), use_tqdm=False)
    again = llm.generate(PROMPTS[:2], _sampled(), use_tqdm=False)
    assert [o.outputs[0].token_ids for o in first] == [o.outputs[0].token_ids for o in again]


def test_greedy_is_not_watermarked(llm, tiny_model):
    greedy = SamplingParams(temperature=0.0, max_tokens=16)
    with LLM(tiny_model, seed=0, **CONFIG) as plain:
        expected = plain.generate(PROMPTS, greedy, use_tqdm=False)
    got = llm.generate(PROMPTS, greedy, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in expected]


def test_dual_key_text_is_detected_by_the_dual_key_detector(tiny_model):
    config = {"key": KEY, "algorithm": "dual_key_gumbel", "alpha": 0.3}
    with LLM(tiny_model, watermark_config=config, seed=0, **CONFIG) as engine:
        outs = engine.generate(PROMPTS[:2], _sampled(seed=5), use_tqdm=False)
    detector = DualKeyGumbelWatermarkDetector(KEY, alpha=0.3)
    for out in outs:
        assert detector.detect(list(out.outputs[0].token_ids)).is_watermarked


def test_asking_without_a_config_runs_unwatermarked(tiny_model, caplog):
    """vLLM's: watermarking=True on an engine without --watermark-config is a warning."""
    with LLM(tiny_model, seed=0, **CONFIG) as engine:
        asked = engine.generate(PROMPTS[:1], _sampled(seed=3, watermarking=True), use_tqdm=False)
        plain = engine.generate(PROMPTS[:1], _sampled(seed=3), use_tqdm=False)
    assert asked[0].outputs[0].token_ids == plain[0].outputs[0].token_ids
    assert "no watermark configuration" in caplog.text


async def _batch(engine: AsyncEngine, tag: str) -> list[list[int]]:
    results: list[list[int]] = [[] for _ in PROMPTS]

    async def one(i: int) -> None:
        params = _sampled(seed=i, max_tokens=24)
        async for out in engine.generate(PROMPTS[i], params, request_id=f"{tag}{i}"):
            results[i] = list(out.outputs[0].token_ids)

    async with anyio.create_task_group() as tg:
        for i in range(len(PROMPTS)):
            tg.start_soon(one, i)
    return results


@pytest.mark.anyio
async def test_a_crash_and_the_ledger_replay_redraw_the_same_tokens(anyio_backend, tiny_model):
    async with AsyncEngine.open(
        tiny_model, watermark_config={"key": KEY}, async_scheduling=True, **CONFIG
    ) as engine:
        reference = await _batch(engine, "a")
        inject_fault(engine, "executor", at_message=6)  # mid-decode: replayed from the ledger
        replayed = await _batch(engine, "b")
        assert engine._actor_stat("restarts")["executor"] >= 1
    assert replayed == reference
    detector = GumbelWatermarkDetector(KEY)
    assert all(detector.detect(tokens).is_watermarked for tokens in replayed)


def test_finished_requests_are_counted_by_watermark_status(tiny_model):
    """vLLM's test_llm_generated_sequence_is_watermarked's metric check: one request of
    each status; actorllm:watermark_requests (vLLM's name, our prefix) sums to request_success."""
    with LLM(tiny_model, watermark_config={"key": KEY}, seed=0, **CONFIG) as engine:
        engine.generate(PROMPTS[:1], _sampled(max_tokens=4, watermarking=True), use_tqdm=False)
        engine.generate(PROMPTS[:1], _sampled(max_tokens=4, watermarking=False), use_tqdm=False)
        greedy = SamplingParams(temperature=0.0, max_tokens=4)
        engine.generate(PROMPTS[:1], greedy, use_tqdm=False)
        metrics = engine.get_metrics()
    counters = [m for m in metrics if isinstance(m, Counter)]
    status = {
        m.labels["status"]: m.value for m in counters if m.name == "actorllm:watermark_requests"
    }
    assert status == {"watermarked": 1, "skipped": 1, "not_watermarked": 1}
    success = sum(m.value for m in counters if m.name == "actorllm:request_success")
    assert sum(status.values()) == success


def test_no_watermark_no_status_metric(tiny_model):
    with LLM(tiny_model, seed=0, **CONFIG) as engine:
        engine.generate(PROMPTS[:1], _sampled(max_tokens=2), use_tqdm=False)
        names = {m.name for m in engine.get_metrics()}
    assert "actorllm:request_success" in names and "actorllm:watermark_requests" not in names


@pytest.mark.anyio
async def test_preempted_requests_recompute_the_same_tokens(anyio_backend, tiny_model):
    """A KV pool too small for the batch preempts (recompute): the watermarked tokens after
    the recomputation are those of an unpreempted run."""
    small = {**CONFIG, "num_gpu_blocks_override": 18, "block_size": 4, "max_model_len": 64}
    async with AsyncEngine.open(tiny_model, watermark_config={"key": KEY}, **CONFIG) as engine:
        reference = await _batch(engine, "a")
    async with AsyncEngine.open(tiny_model, watermark_config={"key": KEY}, **small) as engine:
        preempted = await _batch(engine, "b")
        assert (await engine.get_stats()).num_preemptions > 0
    assert preempted == reference
