import threading
import time

import anyio
import pytest

from actorllm.worker.worker_thread import LoopPoster, Outcome, WorkerThread

pytestmark = pytest.mark.anyio


async def test_jobs_run_in_order_on_one_dedicated_thread():
    worker = WorkerThread()
    worker.start()
    try:
        idents = [await worker.call(threading.get_ident) for _ in range(3)]
        assert len(set(idents)) == 1 and idents[0] != threading.get_ident()
        order: list[int] = []
        done = anyio.Event()
        for i in range(5):
            worker.submit(lambda i=i: order.append(i))
        worker.submit(lambda: None, lambda _outcome: done.set())
        await done.wait()
        assert order == [0, 1, 2, 3, 4]
    finally:
        worker.stop()
    assert not worker.is_alive()


async def test_exceptions_come_back_to_the_caller():
    worker = WorkerThread()
    worker.start()
    try:
        with pytest.raises(KeyError):
            await worker.call(lambda: {}["missing"])
        assert await worker.call(lambda: 42) == 42  # the thread survived
    finally:
        worker.stop()


async def test_the_loop_stays_responsive_during_a_long_job():
    worker = WorkerThread()
    worker.start()
    try:
        finished = anyio.Event()
        worker.submit(lambda: time.sleep(0.3), lambda _o: finished.set())
        t0 = time.perf_counter()
        await anyio.sleep(0.01)
        assert time.perf_counter() - t0 < 0.1  # not stuck behind the 300 ms job
        await finished.wait()
    finally:
        worker.stop()


async def test_posting_back_never_waits_for_a_busy_loop():
    """The thread hands each outcome to the loop and goes straight on to its next job, even
    while the loop is busy (a blocking hand-off would stall it until the loop is free)."""
    worker = WorkerThread()
    worker.start()
    try:
        seen: list[int] = []
        finished: list[float] = []
        all_done = anyio.Event()

        def on_done(outcome: Outcome[int]) -> None:
            seen.append(outcome.unwrap())
            if len(seen) == 3:
                all_done.set()

        for i in range(3):
            worker.submit(lambda i=i: (finished.append(time.perf_counter()), i)[1], on_done)
        time.sleep(0.3)  # the loop is busy (blocked) while the thread runs all three jobs
        assert len(finished) == 3 and not seen  # the jobs ran; no callback ran yet
        await all_done.wait()
        assert seen == [0, 1, 2]  # delivered in order once the loop is free
    finally:
        worker.stop()


async def test_a_failing_posted_callback_is_logged_not_raised(caplog: pytest.LogCaptureFixture):
    poster = LoopPoster()
    ran = anyio.Event()

    def boom() -> None:
        raise RuntimeError("callback failed")

    threading.Thread(target=lambda: (poster.post(boom), poster.post(ran.set))).start()
    await ran.wait()  # the loop survived the failing callback and ran the next one
    assert "callback posted to the event loop failed" in caplog.text


def test_posting_to_a_finished_loop_is_dropped_silently():
    box: list[LoopPoster] = []

    async def main() -> None:
        box.append(LoopPoster())

    for backend in ("trio", "asyncio"):
        box.clear()
        anyio.run(main, backend=backend)
        box[0].post(lambda: None)  # no loop left to run it: nothing raises
