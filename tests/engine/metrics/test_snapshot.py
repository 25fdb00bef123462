"""The metrics as vLLM's reader gives them (``LLM.get_metrics()``): gauges, integer
counters, histograms with cumulative buckets, the per-position acceptance as a vector."""

from actorllm.engine.api.stats import EngineStats, ReplicaStats
from actorllm.engine.metrics.prometheus import ServerMetrics
from actorllm.engine.metrics.snapshot import Counter, Gauge, Histogram, Vector, snapshot


def _by_name(metrics, name):
    return [m for m in metrics if m.name == name]


def test_each_type_as_vllms_reader_gives_it() -> None:
    m = ServerMetrics("tiny", prefix="vllm")
    m.update_from_stats(EngineStats(
        num_running_reqs=2, num_preemptions=3, spec_decode_num_drafts=5,
        spec_decode_num_accepted_tokens_per_pos=[4, 2, 0, 1], iteration_tokens=[4, 8, 40],
        iterations_done=3,
    ))  # fmt: skip
    got = snapshot(m)
    assert all(g.name.startswith("vllm:") for g in got)
    (running,) = _by_name(got, "vllm:num_requests_running")
    assert isinstance(running, Gauge) and running.value == 2.0
    assert running.labels == {"model_name": "tiny", "engine": "0"}
    (preempted,) = _by_name(got, "vllm:num_preemptions")
    assert isinstance(preempted, Counter) and preempted.value == 3
    (drafts,) = _by_name(got, "vllm:spec_decode_num_drafts")
    assert isinstance(drafts, Counter) and drafts.value == 5
    (per_pos,) = _by_name(got, "vllm:spec_decode_num_accepted_tokens_per_pos")
    assert isinstance(per_pos, Vector) and per_pos.values == [4, 2, 0, 1]
    assert "position" not in per_pos.labels
    (steps,) = _by_name(got, "vllm:iteration_tokens_total")
    assert isinstance(steps, Histogram) and (steps.count, steps.sum) == (3, 52.0)
    assert (steps.buckets["1.0"], steps.buckets["8.0"], steps.buckets["+Inf"]) == (0, 2, 3)


def test_a_vector_per_replica() -> None:
    m = ServerMetrics("tiny")
    replicas = [
        ReplicaStats(engine=i, spec_decode_num_accepted_tokens_per_pos=pos)
        for i, pos in enumerate(([3, 1], [5]))
    ]
    m.update_from_stats(EngineStats(engines=replicas))
    vectors = _by_name(snapshot(m), "actorllm:spec_decode_num_accepted_tokens_per_pos")
    assert sorted((v.labels["engine"], v.values) for v in vectors) == [
        ("0", [3, 1]),
        ("1", [5, 0]),  # positions never counted are 0
    ]
