"""RequestStream: the caller's stream keeps the memory-object-stream contract it replaced."""

from __future__ import annotations

import anyio
import pytest

from actorllm.engine.api.request_stream import RequestStream, WakeCount

pytestmark = pytest.mark.anyio


async def test_items_then_the_end_in_order() -> None:
    stream: RequestStream[int] = RequestStream()
    for i in range(3):
        stream.send_nowait(i)
    stream.close()
    assert [x async for x in stream] == [0, 1, 2]
    with pytest.raises(anyio.EndOfStream):
        await stream.receive()


async def test_a_parked_reader_wakes_for_each_item_and_for_the_end() -> None:
    stream: RequestStream[int] = RequestStream()
    got: list[int] = []

    async def read() -> None:
        async for x in stream:
            got.append(x)

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        await anyio.wait_all_tasks_blocked()
        assert stream.statistics().reader_waiting
        stream.send_nowait(1)
        await anyio.wait_all_tasks_blocked()
        stream.send_nowait(2)
        stream.send_nowait(3)
        await anyio.wait_all_tasks_blocked()
        stream.close()
    assert got == [1, 2, 3]


async def test_cancelling_a_parked_reader_loses_nothing() -> None:
    stream: RequestStream[str] = RequestStream()
    with anyio.move_on_after(0.01):
        await stream.receive()
    assert not stream.statistics().reader_waiting
    stream.send_nowait("a")
    assert await stream.receive() == "a"


async def test_a_reader_that_left_breaks_the_writer() -> None:
    stream: RequestStream[int] = RequestStream()
    async with stream:
        stream.send_nowait(1)
    with pytest.raises(anyio.BrokenResourceError):
        stream.send_nowait(2)
    assert len(stream) == 0


async def test_sending_after_close_raises() -> None:
    stream: RequestStream[int] = RequestStream()
    stream.close()
    stream.close()  # idempotent
    with pytest.raises(anyio.ClosedResourceError):
        stream.send_nowait(1)


async def test_offer_wakes_the_reader_and_refuses_past_the_limit() -> None:
    stream: RequestStream[int] = RequestStream()
    got: list[int] = []

    async def read_one() -> None:
        got.append(await stream.receive())

    async with anyio.create_task_group() as tg:
        tg.start_soon(read_one)
        await anyio.wait_all_tasks_blocked()
        assert stream.offer(1, 2) is True
    assert got == [1]
    assert stream.offer(2, 2) is True
    assert stream.offer(3, 2) is True
    assert stream.offer(4, 2) is False  # two unread: nothing sent
    assert len(stream) == 2
    stream.close()
    assert stream.offer(5, 2) is None  # closed
    reader_gone: RequestStream[int] = RequestStream()
    reader_gone.close_reader()
    assert reader_gone.offer(1, 2) is None


def _sum(unread: list[int], new: list[int]) -> list[int] | None:
    """A merge that folds lists by concatenation, and refuses an empty one."""
    return unread + new if new else None


async def test_offers_fold_into_the_unread_item_and_wake_the_reader_once() -> None:
    stream: RequestStream[list[int]] = RequestStream(_sum)
    got: list[list[int]] = []

    async def read() -> None:
        async for x in stream:
            got.append(x)

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        await anyio.wait_all_tasks_blocked()
        for i in range(4):  # the reader is woken by the first and runs after the last
            assert stream.offer([i], 10) is True
        assert len(stream) == 4 and stream.statistics().current_buffer_used == 4
        await anyio.wait_all_tasks_blocked()
        assert got == [[0, 1, 2, 3]] and len(stream) == 0
        stream.offer([4], 10)
        stream.offer([], 10)  # refused by merge: queued behind, not folded
        stream.offer([5], 10)  # two items unread: never folded
        stream.close()
    assert got == [[0, 1, 2, 3], [4], [], [5]]


async def test_the_backlog_counts_folded_deliveries() -> None:
    stream: RequestStream[list[int]] = RequestStream(_sum)
    assert [stream.offer([i], 3) for i in range(4)] == [True, True, True, False]
    assert len(stream) == 3
    assert await stream.receive() == [0, 1, 2]
    assert len(stream) == 0 and stream.offer([9], 3) is True


async def test_woken_readers_are_counted_until_they_run() -> None:
    wakes = WakeCount()
    streams = [RequestStream[int](wakes=wakes) for _ in range(3)]
    got: list[int] = []

    async def read(stream: RequestStream[int]) -> None:
        async for x in stream:
            got.append(x)

    async with anyio.create_task_group() as tg:
        for s in streams:
            tg.start_soon(read, s)
        await anyio.wait_all_tasks_blocked()
        for i, s in enumerate(streams[:2]):
            s.send_nowait(i)  # two parked readers woken, not run yet
        assert wakes.pending == 2
        streams[2].send_nowait(2)
        assert wakes.pending == 3
        await anyio.wait_all_tasks_blocked()  # they ran (and parked again)
        assert wakes.pending == 0 and sorted(got) == [0, 1, 2]
        streams[0].offer(5, 10)  # offer wakes too
        assert wakes.pending == 1
        for s in streams:
            s.close()
    assert wakes.pending == 0


async def test_streams_holding_an_untaken_delivery_are_counted() -> None:
    wakes = WakeCount()
    a = RequestStream[list[int]](_sum, wakes)
    b = RequestStream[list[int]](_sum, wakes)
    a.send_nowait([1])
    a.offer([2], 10)  # a second item (or a fold) on the same stream counts once
    b.offer([3], 10)
    assert wakes.unread == 2
    assert await a.receive() == [1, 2]  # folded: taking the lone item empties the stream
    assert wakes.unread == 1
    b.close_reader()  # a reader that leaves with a delivery untaken
    assert wakes.unread == 0
    assert b.offer([4], 10) is None and wakes.unread == 0
