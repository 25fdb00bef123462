"""bench/machine.py: the host's CPU time counters behind each run's steal share."""

from __future__ import annotations

import sys

import pytest

from actorllm.bench.machine import cpu_times, gemm_probe_ms, steal_share


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat is Linux's")
def test_cpu_times_reads_the_aggregate_line_and_only_grows() -> None:
    before = cpu_times()
    sum(i * i for i in range(200_000))  # some CPU time passes
    after = cpu_times()
    assert before is not None and after is not None and len(before) >= 8
    assert all(b >= a for a, b in zip(before, after, strict=True))
    share = steal_share(before, after)
    assert share is None or 0.0 <= share <= 1.0


def test_steal_share_is_none_without_counters_or_time() -> None:
    assert steal_share(None, [1] * 8) is None
    assert steal_share([1] * 8, [1] * 8) is None  # no time passed
    assert steal_share([0] * 10, [10, 0, 0, 10, 0, 0, 0, 5, 0, 0]) == 0.2


def test_the_gemm_probe_times_one_matmul() -> None:
    ms = gemm_probe_ms(samples=3)
    assert isinstance(ms, float) and 0.0 < ms < 10_000
