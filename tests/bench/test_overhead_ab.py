"""benchmarks/overhead_ab.py: two trees, fresh processes, alternating rounds, medians."""

import json
from pathlib import Path

import pytest

from benchmarks import overhead_ab

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # four fresh interpreters, each starting an engine (~3 s each)
def test_compares_two_trees_round_by_round(tmp_path, capsys):
    out = tmp_path / "ab.json"
    argv = ["--base", str(ROOT), "--head", str(ROOT), "--num-running", "4", "--steps", "5"]
    assert overhead_ab.main([*argv, "--rounds", "2", "--output-json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "overhead_ab" and doc["machine"]["cpu_model"]
    for name in ("base", "head"):
        figures = doc["figures"][name]
        assert len(figures["runs"]) == 2
        median = figures["median"]
        assert median["engine_step_ms"] > 0 and median["core_step_ms"] > 0
        assert median["loop_cpu_ms_per_step"] > 0 and median["ratio"] > 0
    printed = capsys.readouterr().out
    assert printed.count("round ") == 4 and "engine/core" in printed
