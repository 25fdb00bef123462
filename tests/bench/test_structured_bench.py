"""``bench throughput --structured json``: the workload's schema cannot end early."""

from __future__ import annotations

from actorllm.bench.throughput_run import structured_workload


def test_structured_workload() -> None:
    assert structured_workload(None, 8) is None
    assert structured_workload("none", 8) is None
    so = structured_workload("json", 8)
    assert so is not None and so.schema is not None and so.schema["minItems"] == 8
