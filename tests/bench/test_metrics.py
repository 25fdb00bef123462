from __future__ import annotations

import math

from actorllm.bench.bandwidth import bound_ms, device_bandwidth_gbps, model_bytes
from actorllm.demo import demo_model_path
from actorllm.testing.percentiles import percentile, summarize


def test_percentile_interpolates_like_numpy() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5.0], 99) == 5.0
    assert percentile([10, 0], 90) == 9.0
    assert math.isnan(percentile([], 50))


def test_summarize_scales() -> None:
    s = summarize([0.001, 0.003], scale=1e3)
    assert (s["mean"], s["median"], s["min"], s["max"]) == (2.0, 2.0, 1.0, 3.0)


def test_bandwidth_table_and_bound() -> None:
    assert device_bandwidth_gbps("NVIDIA H100 80GB HBM3") == 3350.0
    assert device_bandwidth_gbps("NVIDIA H200") == 4800.0
    assert device_bandwidth_gbps(None) is None  # CPU: n/a
    assert device_bandwidth_gbps(None, override=100.0) == 100.0
    assert bound_ms(2 * 10**9, 10**9, 3000.0) == 1.0


def test_model_bytes_of_the_demo_model() -> None:
    weights, kv = model_bytes(demo_model_path(), "float32")
    # 3 layers x (K + V) x 2 kv heads x head_dim 64 x 4 bytes
    assert kv == 3 * 2 * 2 * 64 * 4
    # the 4096x256 embedding (tied to the head, counted once) and 3 layers of 0.69M
    assert weights == 4 * (4096 * 256 + 3 * 688_640 + 256)
