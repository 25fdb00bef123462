"""Smoke tests: each ``actorllm bench`` subcommand on tiny settings writes a sound JSON.

No assertions on speed (the machine is shared): only structure and sanity.
"""

from __future__ import annotations

import json
import pstats
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actorllm.bench.datasets import nanovllm_requests
from actorllm.entrypoints.cli import main
from actorllm.entrypoints.openai.app import AppSettings, build_app
from actorllm.testing.engine_harness import open_test_engine
from tests.entrypoints.server_thread import ServerThread

TINY_ENGINE = ["--load-format", "dummy", "--max-model-len", "128"]


def _bench(tmp_path: Path, *argv: str) -> dict[str, Any]:
    out = tmp_path / "result.json"
    assert main(["bench", *argv, "--output-json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == argv[0]
    assert doc["arguments"]["benchmark"] == argv[0]  # the parsed flags, exactly
    assert isinstance(doc["command"], str)
    assert doc["machine"]["cpu_count"] >= 1 and doc["machine"]["torch"]
    assert doc["date"] and doc["machine"]["actorllm"]
    return doc


def test_throughput_both_backends_same_work(tmp_path: Path) -> None:
    doc = _bench(
        tmp_path,
        "throughput",
        "--backend",
        "both",
        "--dataset",
        "nanovllm",
        "--num-prompts",
        "3",
        "--max-len",
        "12",
        "--hf-batch-sizes",
        "1,2",
        *TINY_ENGINE,
    )
    fig = doc["figures"]
    reqs = nanovllm_requests(num_prompts=3, max_len=12, vocab_size=4096)
    out_tokens = sum(r.output_len for r in reqs)
    prompt_tokens = sum(len(r.prompt_token_ids) for r in reqs)
    assert fig["workload"] == {**fig["workload"], "num_requests": 3, "output_tokens": out_tokens}
    ours, hf = fig["actorllm"], fig["hf"]["best"]
    assert ours["output_tokens"] == hf["output_tokens"] == out_tokens
    assert ours["prompt_tokens"] == hf["prompt_tokens"] == prompt_tokens
    assert [r["batch_size"] for r in fig["hf"]["sweep"]] == [1, 2]
    for f in (ours, hf):
        assert f["output_tokens_per_s"] > 0 and f["requests_per_s"] > 0
        assert f["total_tokens_per_s"] > f["output_tokens_per_s"]
    assert fig["speedup_output_tokens_vs_hf_best"] > 0
    assert 0.0 <= hf["padding_waste"] < 1.0
    assert ours["steps"] >= max(r.output_len for r in reqs)  # one token per request per step
    assert doc["config"]["temperature"] == 0.6  # nano-vllm's
    assert doc["arguments"]["num_prompts"] == 3 and doc["arguments"]["max_len"] == 12


def test_throughput_random_actorllm_only_with_profiles(tmp_path: Path) -> None:
    prof = tmp_path / "prof"
    doc = _bench(
        tmp_path, "throughput", "--num-prompts", "2", "--input-len", "8", "--output-len", "4",
        "--profile", str(prof), *TINY_ENGINE,
    )  # fmt: skip
    assert "hf" not in doc["figures"]
    assert doc["figures"]["actorllm"]["output_tokens"] == 8
    for name in ("loop.prof", "worker.prof"):  # both threads were really profiled
        stats = pstats.Stats(str(prof / name))
        assert stats.total_calls > 0, name  # type: ignore[attr-defined]


def test_throughput_pp2_reports_the_bytes_between_stages(tmp_path: Path) -> None:
    """-pp 2 reaches the engine; every step's [2, T, H] float32 from stage 0 is counted
    (float32 given: "auto" is bf16 on a host with native bf16)."""
    doc = _bench(
        tmp_path, "throughput", "--num-prompts", "2", "--input-len", "8", "--output-len", "4",
        "-pp", "2", "--dtype", "float32", *TINY_ENGINE,
    )  # fmt: skip
    ours = doc["figures"]["actorllm"]
    assert ours["output_tokens"] == 8
    pp = ours["pipeline_parallel"]
    stage0, last = sorted(pp["ranks"], key=lambda r: r["stage"])
    assert (stage0["rank"], last["rank"]) == (1, 0)  # rank 0 holds the last stage
    tokens = 2 * 8 + 2 * 3  # prompts, then one token per decode step but the last
    hidden = 256  # the demo model's
    assert stage0["bytes_sent_per_step"] * pp["steps"] == 2 * tokens * hidden * 4
    assert last["bytes_received_per_step"] == stage0["bytes_sent_per_step"]
    assert pp["bytes_between_stages_per_step"] == stage0["bytes_sent_per_step"]


@pytest.mark.parametrize("interval", ["1", "3"])
def test_overhead_small(tmp_path: Path, interval: str) -> None:
    doc = _bench(
        tmp_path, "overhead", "--num-running", "8", "--steps", "5", "--stream-interval", interval
    )
    assert doc["config"]["stream_interval"] == int(interval)
    (row,) = doc["figures"]["rows"]
    assert row["num_running"] == 8
    assert row["engine_steps"] >= 5 and row["core_steps"] == 5
    assert row["engine_step_ms"] > 0 and row["core_step_ms"] > 0
    assert row["ratio"] == pytest.approx(row["engine_step_ms"] / row["core_step_ms"])
    # DELTA callers are woken every step: the floor ratio counts that, per stream interval
    assert row["wake_floor_ms"] > 0
    floor = (row["core_step_ms"] + row["wake_floor_ms"]) / row["core_step_ms"]
    assert row["floor_ratio"] == pytest.approx(floor)
    # and each gets one RequestOutput per step: the streaming API's own floor
    assert row["output_floor_ms"] > 0
    floor = (row["core_step_ms"] + row["output_floor_ms"]) / row["core_step_ms"]
    assert row["output_floor_ratio"] == pytest.approx(floor)


def test_overhead_lane_bound(tmp_path: Path) -> None:
    doc = _bench(tmp_path, "overhead", "--num-running", "8", "--steps", "5", "--lane-bound")
    assert doc["config"]["lane_bound"] is True
    (row,) = doc["figures"]["rows"]
    base = row["core_step_ms"] + row["output_floor_ms"]
    assert row["engine_over_floor"] == pytest.approx(row["engine_step_ms"] / base)
    assert row["lane_bound_step_ms"] > 0
    assert row["lane_bound_over_floor"] == pytest.approx(row["lane_bound_step_ms"] / base)


def test_overhead_lane_bound_is_for_the_delta_lane() -> None:
    from actorllm.bench.overhead import run_overhead

    with pytest.raises(ValueError, match="DELTA lane at stream_interval 1"):
        run_overhead([8], steps=5, output_kind="final", lane_bound=True)


def test_overhead_final_only_has_no_wake_floor(tmp_path: Path) -> None:
    doc = _bench(
        tmp_path, "overhead", "--num-running", "8", "--steps", "5", "--output-kind", "final"
    )
    (row,) = doc["figures"]["rows"]
    assert row["wake_floor_ms"] == 0.0 and row["floor_ratio"] == 1.0
    assert row["output_floor_ms"] == 0.0 and row["output_floor_ratio"] == 1.0


def test_latency_small(tmp_path: Path) -> None:
    doc = _bench(
        tmp_path, "latency", "--batch-sizes", "1,2", "--input-len", "8", "--output-len", "6",
        *TINY_ENGINE,
    )  # fmt: skip
    rows = doc["figures"]["rows"]
    assert [r["batch_size"] for r in rows] == [1, 2]
    for r in rows:
        assert r["samples"] >= 1 and r["step_ms_median"] > 0 and r["step_ms_p90"] > 0
        assert r["bound_ms"] is None  # CPU: no bandwidth bound


@pytest.fixture
def scripted_server() -> Iterator[ServerThread]:
    app = build_app(lambda: open_test_engine(), AppSettings(log_interval_s=0))
    srv = ServerThread(app).start()
    yield srv
    srv.stop()
    assert srv.error is None


def test_serve_two_requests(tmp_path: Path, scripted_server: ServerThread) -> None:
    doc = _bench(
        tmp_path, "serve", "--base-url", scripted_server.url, "--num-prompts", "2",
        "--input-len", "8", "--output-len", "5", "--request-rate", "50",
    )  # fmt: skip
    fig = doc["figures"]
    assert (fig["completed"], fig["failed"], fig["output_tokens"]) == (2, 0, 10)
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        assert fig[key]["mean"] > 0 and fig[key]["p99"] >= fig[key]["median"] > 0
    assert fig["e2el_ms"]["max"] >= fig["ttft_ms"]["max"]
    assert fig["requests_per_s"] > 0 and fig["output_tokens_per_s"] > 0
