"""bench/output_floor.py: each step hands every caller exactly one output, on both loops."""

from __future__ import annotations

from collections import deque
from typing import Any

import anyio
import pytest

from actorllm.bench import output_floor, wake_floor
from actorllm.core.outputs import RequestOutput


@pytest.mark.anyio
async def test_output_floor_times_every_step(anyio_backend: str) -> None:
    result = await output_floor.output_floor_ms(16, 5)
    assert result["steps"] == 5
    assert result["step_ms"] > 0
    assert result["us_per_caller"] == pytest.approx(result["step_ms"] * 1e3 / 16)


@pytest.mark.anyio
async def test_each_step_gives_each_caller_its_own_next_output(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Record what every caller reads: a step that returned before each caller read its
    # output (or one read twice, or another's) would time the wrong thing.
    seen: dict[str, list[int]] = {}
    real = output_floor.reads

    async def recording(queue: deque[RequestOutput], wait: Any) -> Any:
        async for out in real(queue, wait):
            seen.setdefault(out.request_id, []).append(out.outputs[0].token_ids[0])
            yield out

    monkeypatch.setattr(output_floor, "reads", recording)
    n, steps = 5, 3
    await output_floor.output_floor_ms(n, steps)
    total = steps + wake_floor.WARMUP_STEPS
    assert sorted(seen) == [f"r{i}" for i in range(n)]
    for tokens in seen.values():
        assert tokens == list(range(1, total + 1))


@pytest.mark.anyio
async def test_reads_parks_until_an_output_and_ends_after_the_finished_one(
    anyio_backend: str,
) -> None:
    queue: deque[RequestOutput] = deque()
    woken = anyio.Event()
    waits = 0

    async def wait() -> None:
        nonlocal waits
        waits += 1
        await woken.wait()

    got: list[int] = []

    async def read_all() -> None:
        async for out in output_floor.reads(queue, wait):
            got.append(out.outputs[0].token_ids[0])

    async with anyio.create_task_group() as tg:
        tg.start_soon(read_all)
        await anyio.wait_all_tasks_blocked()
        assert waits == 1 and not got  # parked on the empty queue
        queue.append(output_floor.make_output("r", [1], 7, 0.0))
        last = output_floor.make_output("r", [1], 8, 0.0)
        last.finished = True
        queue.append(last)
        woken.set()
    assert got == [7, 8] and waits == 1
