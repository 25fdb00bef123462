"""benchmarks/output_stream_bench.py: each lane in fresh processes, both trees, the JSON."""

import json
from pathlib import Path

import pytest

from benchmarks import output_stream_bench

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # a fresh interpreter per lane and tree (~4 s each)
def test_each_lane_and_tree_gets_its_first_and_last_window(tmp_path, capsys):
    out = tmp_path / "stream.json"
    argv = ["--base", str(ROOT), "--lanes", "stop,n2", "--requests", "4"]
    argv += ["--steps", "30", "--window", "10", "--rounds", "1", "--output-json", str(out)]
    assert output_stream_bench.main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "output_stream" and doc["machine"]["cpu_model"]
    rows = doc["figures"]["rows"]
    assert [(r["lane"], r["tree"]) for r in rows] == [
        (lane, tree) for lane in ("stop", "n2") for tree in ("head", "base")
    ]
    for row in rows:
        assert row["first_ms"] > 0 and row["last_ms"] > 0
        assert row["growth"] == row["last_ms"] / row["first_ms"]
    assert capsys.readouterr().out.count(" first ") == 4
