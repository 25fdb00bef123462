"""The families vLLM 0.32's tests/entrypoints/serve/instrumentator/test_metrics.py reads,
with vLLM's types and labels, rendered from engine statistics."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from actorllm.core.request_stats import FinishedRequest, RequestStats
from actorllm.engine.api.stats import EngineStats, ReplicaStats
from actorllm.engine.config.engine_config import EngineConfig
from actorllm.engine.metrics.prometheus import ServerMetrics

# vLLM's EXPECTED_METRICS_V1, without the prefix.
EXPECTED = [
    "num_requests_running", "num_requests_waiting", "num_requests_waiting_by_reason",
    "kv_cache_usage_perc", "prefix_cache_queries", "prefix_cache_hits", "num_preemptions_total",
    "admission_rejections_total", "prompt_tokens_total", "generation_tokens_total",
    "iteration_tokens_total", "cache_config_info", "request_success_total",
    *(f"{h}_{s}" for h in (
        "request_prompt_tokens", "request_generation_tokens", "request_params_n",
        "request_params_max_tokens", "time_to_first_token_seconds",
        "inter_token_latency_seconds", "e2e_request_latency_seconds",
        "request_queue_time_seconds", "request_inference_time_seconds",
        "request_prefill_time_seconds", "request_decode_time_seconds",
        "request_num_preemptions",
    ) for s in ("sum", "bucket", "count")),
]  # fmt: skip


def _families(m: ServerMetrics) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    return {
        f.name: [(s.name, s.labels, s.value) for s in f.samples]
        for f in text_string_to_metric_families(m.render().decode())
    }


def _metrics(**stats: object) -> ServerMetrics:
    m = ServerMetrics("tiny", prefix="vllm", cache_config=EngineConfig(), max_model_len=1000)
    m.update_from_stats(EngineStats(requests=RequestStats(1000).snapshot(), **stats))  # type: ignore[arg-type]
    return m


def test_every_name_vllms_test_expects() -> None:
    text = _metrics().render().decode()
    assert [n for n in EXPECTED if f"vllm:{n}" not in text] == []


def test_time_per_output_token_under_vllms_two_names() -> None:
    stats = RequestStats(1000)
    stats.finished(FinishedRequest(finish_reason="stop", arrival_time=0.0, scheduled_time=0.0,
        first_token_time=1.0, last_token_time=3.0, finished_time=3.0, prompt_tokens=2,
        generation_tokens=5, max_generation_tokens=5, n=1, max_tokens=5))  # fmt: skip
    m = ServerMetrics("tiny", prefix="vllm")
    m.update_from_stats(EngineStats(requests=stats.snapshot()))
    got = _families(m)
    for name in ("time_per_output_token_seconds", "request_time_per_output_token_seconds"):
        sums = [s[2] for s in got[f"vllm:{name}"] if s[0].endswith("_sum")]
        assert sums == [0.5], name  # 2 s over the 4 tokens after the first


def test_waiting_requests_by_reason_sum_to_the_waiting() -> None:
    got = _families(_metrics(num_waiting_reqs=5, num_deferred_reqs=2))
    by_reason = {s[1]["reason"]: s[2] for s in got["vllm:num_requests_waiting_by_reason"]}
    assert by_reason == {"capacity": 3, "deferred": 2}
    assert got["vllm:num_requests_waiting"][0][2] == 5


def test_cache_config_info_names_the_kv_capacity() -> None:
    m = ServerMetrics("tiny", prefix="vllm", cache_config=EngineConfig(block_size=16),
                      max_model_len=1000)  # fmt: skip
    m.update_from_stats(EngineStats(num_gpu_blocks=100))
    ((_, labels, value),) = _families(m)["vllm:cache_config_info"]
    assert value == 1.0
    # 1000 tokens take 63 blocks of 16: 100 blocks hold 1.587 such requests
    assert labels["kv_cache_max_concurrency"] == str(100 / 63)
    assert labels["kv_cache_size_tokens"] == str(int(100 / 63 * 1000))


def test_cache_config_info_per_replica() -> None:
    engines = [ReplicaStats(engine=i, num_gpu_blocks=b) for i, b in enumerate((63, 126))]
    m = ServerMetrics("tiny", cache_config=EngineConfig(block_size=16), max_model_len=1000)
    m.update_from_stats(EngineStats(engines=engines))
    got = {s[1]["engine"]: s[1]["kv_cache_max_concurrency"]
           for s in _families(m)["actorllm:cache_config_info"]}  # fmt: skip
    assert got == {"0": "1.0", "1": "2.0"}


def test_admission_rejections_have_vllms_labels() -> None:
    stats = RequestStats(1000)
    stats.rejected("max_num_queued_reqs")
    m = ServerMetrics("tiny", prefix="vllm")
    m.update_from_stats(EngineStats(requests=stats.snapshot()))
    samples = _families(m)["vllm:admission_rejections"]
    totals = {s[1]["reason"]: s[2] for s in samples if s[0].endswith("_total")}
    assert totals == {"max_num_queued_reqs": 1, "max_num_queued_tokens": 0}
    assert {frozenset(s[1]) for s in samples} == {frozenset({"model_name", "reason"})}
