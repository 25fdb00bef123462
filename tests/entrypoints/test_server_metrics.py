"""/metrics after traffic: vLLM's names with the actorllm: prefix, labels and exact counts."""

from __future__ import annotations

import logging
import re

import anyio
import httpx
import pytest

from actorllm.core.outputs import CompletionOutput, RequestMetrics, RequestOutput
from actorllm.entrypoints.metrics import ServerMetrics, log_stats_forever
from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import FakeEngine, FakeStats


def sample(text: str, name: str, **labels: str) -> float:
    want = {"model_name": "fake-model", **labels}
    for line in text.splitlines():
        m = re.match(r"^([^{ ]+)\{([^}]*)\} (\S+)$", line)
        if m and m.group(1) == name:
            got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            if got == want:
                return float(m.group(3))
    raise AssertionError(f"no sample {name}{want}")


def test_metrics_after_requests() -> None:
    engine = FakeEngine()
    srv = start_server(engine)
    try:
        url = srv.url
        r1 = httpx.post(url + "/v1/completions", json={"prompt": "hello", "max_tokens": 3}).json()
        r2 = httpx.post(
            url + "/v1/completions", json={"prompt": "x", "max_tokens": 2, "n": 2, "stream": True}
        )
        assert r2.status_code == 200
        httpx.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 9, "stop": "brown"})
        text = httpx.get(url + "/metrics").text
    finally:
        srv.stop()
    prompt = r1["usage"]["prompt_tokens"] + 1 + 1
    assert sample(text, "actorllm:prompt_tokens_total") == prompt
    assert sample(text, "actorllm:generation_tokens_total") == 3 + 4 + 3
    assert sample(text, "actorllm:request_success_total", finished_reason="length") == 2
    assert sample(text, "actorllm:request_success_total", finished_reason="stop") == 1
    for hist in (
        "time_to_first_token_seconds",
        "e2e_request_latency_seconds",
        "request_queue_time_seconds",
    ):
        assert sample(text, f"actorllm:{hist}_count") == 3
    # inter-token gaps of the longest sequence: 3 tokens, 2 (n=2), 3 (stopped at "brown")
    assert sample(text, "actorllm:inter_token_latency_seconds_count") == 2 + 1 + 2
    assert sample(text, "actorllm:prefix_cache_queries_total") == engine.prefix_queries
    assert sample(text, "actorllm:num_requests_running") == 0
    assert sample(text, "actorllm:kv_cache_usage_perc") == 0
    assert sample(text, "actorllm:actor_restarts_total", actor="scheduler") == 1
    assert sample(text, "actorllm:mailbox_depth", actor="router") == 0
    assert sample(text, "actorllm:iteration_tokens_total_count") == 2


def test_cumulative_engine_counters_survive_a_reset() -> None:
    m = ServerMetrics("fake-model")

    class Stats:
        prefix_cache_queries = 10
        num_preemptions = 3

    m.update_from_stats(Stats())
    Stats.prefix_cache_queries = 4  # the engine restarted its counters
    m.update_from_stats(Stats())
    assert sample(m.render().decode(), "actorllm:prefix_cache_queries_total") == 14
    assert sample(m.render().decode(), "actorllm:num_preemptions_total") == 3


def test_observer_counts_final_only_outputs() -> None:
    m = ServerMetrics("fake-model")
    out = RequestOutput(
        request_id="r",
        prompt="p",
        prompt_token_ids=[1, 2],
        prompt_logprobs=None,
        finished=True,
        outputs=[
            CompletionOutput(index=0, text="abc", token_ids=[5, 6, 7], finish_reason="length")
        ],
        metrics=RequestMetrics(
            arrival_time=10.0,
            first_scheduled_time=10.5,
            first_token_time=11.0,
            last_token_time=13.0,
            finished_time=13.0,
        ),
    )
    m.observe_request().update(out, delta=False)
    text = m.render().decode()
    assert sample(text, "actorllm:generation_tokens_total") == 3
    assert sample(text, "actorllm:inter_token_latency_seconds_sum") == pytest.approx(2.0)
    assert sample(text, "actorllm:time_to_first_token_seconds_sum") == pytest.approx(1.0)
    assert sample(text, "actorllm:request_queue_time_seconds_sum") == pytest.approx(0.5)


@pytest.mark.anyio
async def test_periodic_log_line(caplog: pytest.LogCaptureFixture) -> None:
    engine = FakeEngine()
    m = ServerMetrics("fake-model")
    m.generation_tokens_total = 50
    with caplog.at_level(logging.INFO, logger="actorllm.metrics"):
        with anyio.move_on_after(0.25):
            await log_stats_forever(engine, m, 0.1)
    lines = [r.getMessage() for r in caplog.records if "throughput" in r.getMessage()]
    assert lines and "Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%" in lines[0]
    assert "Avg generation throughput: 0.0 tokens/s" in lines[0]


def test_iteration_tokens_are_observed_once_across_scrapes() -> None:
    metrics = ServerMetrics("m")
    metrics.update_from_stats(FakeStats(iteration_tokens=[4, 8], steps_done=2))
    metrics.update_from_stats(FakeStats(iteration_tokens=[4, 8], steps_done=2))  # no new step
    text = metrics.render().decode()
    assert sample(text, "actorllm:iteration_tokens_total_count", model_name="m") == 2
    metrics.update_from_stats(FakeStats(iteration_tokens=[4, 8, 16], steps_done=3))
    text = metrics.render().decode()
    assert sample(text, "actorllm:iteration_tokens_total_count", model_name="m") == 3
    assert sample(text, "actorllm:iteration_tokens_total_sum", model_name="m") == 28
