"""A streamed background response's event log: replay, follow, end, bound."""

from __future__ import annotations

import anyio
import pytest

from actorllm.entrypoints.openai.responses.event_log import EventLog, EventLogs

pytestmark = pytest.mark.anyio


async def _read(log: EventLog, after: int | None, into: list[int]) -> None:
    async for event in log.follow(after):
        into.append(event["n"])


async def test_readers_replay_then_follow_until_the_log_closes() -> None:
    log = EventLog()
    for n in range(3):
        await log.append({"n": n})
    whole: list[int] = []
    late: list[int] = []
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read, log, None, whole)
            tg.start_soon(_read, log, 1, late)
            await anyio.sleep(0.01)
            assert whole == [0, 1, 2] and late == [2]  # then waiting for more
            await log.append({"n": 3})
            log.close()
    assert whole == [0, 1, 2, 3] and late == [2, 3]
    past: list[int] = []
    await _read(log, 10, past)  # after the last: nothing, and it ends
    assert past == []
    with pytest.raises(RuntimeError):
        await log.append({"n": 4})


async def test_the_bound_drops_only_ended_runs_oldest_first() -> None:
    logs = EventLogs(max_size=2)
    a, b = logs.open("a"), logs.open("b")
    a.close()
    logs.open("c")
    assert logs.get("a") is None and logs.get("b") is b  # b still runs
    logs.open("d")  # b, c and d all run: the bound is passed rather than cut a run
    assert logs.get("b") is b and logs.get("c") is not None and logs.get("d") is not None
