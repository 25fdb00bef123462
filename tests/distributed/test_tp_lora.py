"""LoRA under tensor parallel (models/parallel.py's pair pieces, worker/lora_slots.py's
fills on every rank, the step's row slots): a TP=2 engine serving the base model and 3
adapters at once with ``max_loras=2`` gives peft's greedy tokens row by row; a rank killed
mid-batch is replaced, holds the adapters rank 0 holds, and nothing changes.

One TP=2 engine for all of it: its rank start is the cost."""

from __future__ import annotations

import os
import signal
from typing import Any

import anyio
import pytest

from actorllm.core.lora import LoRARequest
from actorllm.core.sampling_params import SamplingParams
from actorllm.engine import AsyncEngine
from actorllm.testing.engine_harness import check_invariants
from tests.helpers.lora import ATTN_PROJ, make_adapter, peft_greedy

GREEDY = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
PROMPT = [11, 42, 97, 300, 5]
Rows = dict[str, LoRARequest | None]


@pytest.fixture(scope="module")
def rows(llama: str, tmp_path_factory: pytest.TempPathFactory) -> Rows:
    d = tmp_path_factory.mktemp("tp-adapters")
    paths = {
        "sql": make_adapter(llama, d / "sql", r=8, seed=1),
        "chat": make_adapter(llama, d / "chat", r=4, seed=2, use_rslora=True),
        "attn": make_adapter(llama, d / "attn", targets=ATTN_PROJ, r=16, seed=3),
    }
    loras = {n: LoRARequest(n, i + 1, str(p)) for i, (n, p) in enumerate(paths.items())}
    return {"base": None, "base2": None, **loras}


async def _run(engine: AsyncEngine, rows: Rows, tag: str, seen: list[int]) -> dict[str, Any]:
    got: dict[str, list[int]] = {}

    async def one(row: str) -> None:
        async for out in engine.generate(
            {"prompt_token_ids": PROMPT}, GREEDY, request_id=f"{tag}{row}",
            lora_request=rows[row],
        ):  # fmt: skip
            got[row] = list(out.outputs[0].token_ids)
            seen[0] += 1

    async with anyio.create_task_group() as tg:
        for row in rows:
            tg.start_soon(one, row)
    return got


def _slots(worker: Any) -> list[str | None]:
    return list(worker.model_runner.lora.slot_names)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])  # the rank machinery is loop-agnostic
async def test_tp2_mixed_adapters_equal_peft_and_survive_a_killed_rank(
    llama: str, rows: Rows, anyio_backend: str
) -> None:
    expected = peft_greedy(
        llama, {r: (None if lo is None else lo.lora_path, PROMPT) for r, lo in rows.items()},
        GREEDY.max_tokens or 0,
    )  # fmt: skip
    assert len({tuple(t) for t in expected.values()}) == 4  # every adapter changes the output
    async with AsyncEngine.open(
        llama, tensor_parallel_size=2, tp_collective_timeout_s=2.0, dtype="float32",
        block_size=8, enable_lora=True, max_loras=2, max_lora_rank=16,
    ) as engine:  # fmt: skip
        assert await _run(engine, rows, "a", [0]) == expected
        # Both ranks hold the same adapters in the same slots.
        slots = await engine.collective_rpc(_slots)
        assert slots[0] == slots[1] and any(slots[0])

        group = engine._parts.replicas[0].worker.tp
        assert group is not None
        seen = [0]
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                assert await _run(engine, rows, "b", seen) == expected

            tg.start_soon(run)
            while seen[0] == 0:
                await anyio.sleep(0.002)
            os.kill(group.rank_pid(1), signal.SIGKILL)
        assert group.generation == 1
        # The new rank 1 was given rank 0's resident adapters.
        slots = await engine.collective_rpc(_slots)
        assert slots[0] == slots[1] and any(slots[0])
        assert await _run(engine, rows, "c", [0]) == expected
        await check_invariants(engine)
