"""``actorllm bench weight-sync`` on the tiny shape: a push through the engine and a bare
broadcast of the same tensors, both timed, and the document names the machine."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from actorllm.bench import weight_sync


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_tiny_run_times_both_and_names_the_machine(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    weight_sync.add_arguments(parser)
    out = tmp_path / "ws.json"
    args = parser.parse_args(
        ["--shape", "tiny", "--tp", "1", "--repeats", "1", "--output", str(out)]
    )
    assert weight_sync.main(args) == 0
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "weight-sync" and doc["machine"]["cpu_count"] >= 1
    (run,) = doc["figures"]["runs"]
    assert run["tensor_parallel_size"] == 1 and run["push_s"] > 0 and run["bare_broadcast_s"] > 0
    assert doc["figures"]["tensors"] == 25
